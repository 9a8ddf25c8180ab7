"""Running the `maxent-grpo` console script (and `accelerate launch`) as real subprocesses, offline."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DEMO_RECIPE = ROOT / "configs" / "recipes" / "demo.yaml"
MULTI_CPU_CONFIG = ROOT / "configs" / "accelerate" / "multi_cpu.yaml"


def executable(name: str) -> str:
    """An executable installed next to this interpreter (a virtual environment's bin/), else found on PATH."""
    beside = Path(sys.executable).with_name(name)
    found = str(beside) if beside.exists() else shutil.which(name)
    assert found is not None, f"{name} is installed with the package (pip install -e .)"
    return found


def offline_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a subprocess: no Hub access, trackio writing under ``tmp_path``."""
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "TRACKIO_DIR": str(tmp_path / "trackio"),
        **extra,
    }


def run(
    command: Sequence[str], env: dict[str, str], timeout: float = 300, cwd: Path = ROOT, **popen: Any
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(command), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, **popen)


def run_cli(
    args: Sequence[str], env: dict[str, str], timeout: float = 300, cwd: Path = ROOT, **popen: Any
) -> subprocess.CompletedProcess[str]:
    """``maxent-grpo <args>`` through the installed console script (``popen``: more `subprocess.run` arguments)."""
    return run([executable("maxent-grpo"), *args], env, timeout, cwd, **popen)
