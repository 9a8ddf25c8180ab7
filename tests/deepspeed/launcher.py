"""Two gloo processes under DeepSpeed ZeRO on CPU: `accelerate launch --use_deepspeed` of a probe in this folder.

The ZeRO configs are written here; ``stage3_param_persistence_threshold: 0`` makes ZeRO-3 partition even the tiny
model's small parameters (the default keeps parameters under 100k elements whole on every process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cli_runner import executable

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
LAUNCH_TIMEOUT = 600  # seconds; a run whose processes disagree on a collective hangs on NCCL (gloo aborts)


def zero_config(folder: Path, stage: int) -> Path:
    """A DeepSpeed config for CPU fp32 training with the trainer's own optimizer; "auto" takes TRL's values."""
    zero: dict[str, Any] = {"stage": stage}
    if stage == 3:
        zero["stage3_param_persistence_threshold"] = 0
    config = {
        "zero_optimization": zero,
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
        "zero_allow_untested_optimizer": True,  # the Trainer's torch SGD / AdamW
        "bf16": {"enabled": False},
        "fp16": {"enabled": False},
    }
    path = folder / f"zero{stage}.json"
    path.write_text(json.dumps(config))
    return path


def launch(folder: Path, probe: str, stage: int, *probe_args: str) -> list[dict[str, Any]]:
    """Run ``probe`` (in this folder) on two processes under ZeRO ``stage`` with arguments ``folder``, the config
    and ``probe_args``; return each process's JSON. The run must exit 0."""
    config = zero_config(folder, stage)
    python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {k: v for k, v in os.environ.items() if k != "ACCELERATE_USE_CPU"}  # it would switch DeepSpeed off
    env.update({"PYTHONPATH": python_path, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", "HF_HUB_OFFLINE": "1"})
    # DeepSpeed compiles its shm op on first use; kept inside the environment (as .ci/run does), it is built once.
    env.setdefault("TORCH_EXTENSIONS_DIR", str(Path(sys.prefix) / "torch_extensions"))
    command = [
        executable("accelerate"), "launch", "--use_deepspeed", "--deepspeed_config_file", str(config),
        "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", "0", str(HERE / probe), str(folder), str(config), *probe_args,
    ]  # fmt: skip
    try:
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT)
    except subprocess.TimeoutExpired as error:
        stderr = error.stderr.decode(errors="replace") if isinstance(error.stderr, bytes) else error.stderr or ""
        pytest.fail(
            f"{probe} under ZeRO-{stage} did not end in {LAUNCH_TIMEOUT} s (collectives mismatched?)\n{stderr[-4000:]}"
        )
    noise = ("Warning:", "warnings.warn(")
    stderr = "\n".join(line for line in result.stderr.splitlines() if not any(n in line for n in noise))
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout[-2000:]}\n{stderr[-6000:]}"
    return [json.loads((folder / f"rank{rank}.json").read_text()) for rank in (0, 1)]
