"""Running the `maxent-grpo` console script (and `accelerate launch`) as real subprocesses, offline."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
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
    """The environment of a subprocess: no Hub access, trackio writing under ``tmp_path``, one torch thread (as in
    the test process, see `tests.conftest.pytest_configure`)."""
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
        "TRACKIO_DIR": str(tmp_path / "trackio"),
        **extra,
    }


def with_vllm_that_cannot_serve(env: dict[str, str]) -> dict[str, str]:
    """``env`` with a `vllm` package that is found but whose server exits at once (`tests.support.
    vllm_that_cannot_serve`): `maxent-grpo vllm-serve` gets past its vLLM check where vLLM is not installed."""
    package = ROOT / "tests" / "support" / "vllm_that_cannot_serve"
    return {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(package), env.get("PYTHONPATH")]))}


def run(
    command: Sequence[str], env: dict[str, str], timeout: float = 300, cwd: Path = ROOT, **popen: Any
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(command), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, **popen)


def run_cli(
    args: Sequence[str], env: dict[str, str], timeout: float = 300, cwd: Path = ROOT, **popen: Any
) -> subprocess.CompletedProcess[str]:
    """``maxent-grpo <args>`` through the installed console script (``popen``: more `subprocess.run` arguments)."""
    return run([executable("maxent-grpo"), *args], env, timeout, cwd, **popen)


def terminal_signals() -> None:
    """A ``preexec_fn`` for a child that is sent Ctrl-C or a hang-up: SIGINT's and SIGHUP's default dispositions, as
    from a terminal. A pytest-xdist worker, or a shell's background job, ignores SIGINT, and ``nohup`` SIGHUP; a child
    would inherit that, and Python installs no KeyboardInterrupt handler for a signal ignored when it starts."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def interrupt_after_checkpoint(
    command: Sequence[str], checkpoint: Path, env: dict[str, str], cwd: Path, wait: float = 240
) -> tuple[int, str, float]:
    """Run ``command``, send it Ctrl-C (SIGINT) once ``checkpoint`` is complete, and return its exit code, its stderr
    and the seconds from Ctrl-C to its exit. The command gets SIGINT's default disposition (`terminal_signals`)."""
    process = subprocess.Popen(list(command), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, preexec_fn=terminal_signals)  # fmt: skip
    try:
        deadline = time.monotonic() + wait
        while not (checkpoint / "trainer_state.json").exists():
            assert process.poll() is None and time.monotonic() < deadline, f"no {checkpoint.name} was saved"
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        _, stderr = process.communicate(timeout=120)
        return process.returncode, stderr, time.monotonic() - interrupted
    finally:
        process.kill()
