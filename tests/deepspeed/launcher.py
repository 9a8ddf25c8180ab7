"""Two gloo processes under DeepSpeed ZeRO on CPU: `accelerate launch --use_deepspeed` of `probe_zero.py`, which runs
every probe of this folder for one ZeRO stage in the same two processes.

The ZeRO configs are written here; ``stage3_param_persistence_threshold: 0`` makes ZeRO-3 partition even the tiny
model's small parameters (the default keeps parameters under 100k elements whole on every process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cli_runner import executable
from tests.support.real_vllm_server import VLLMServerProcess

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
# Seconds; a run whose processes disagree on a collective hangs on NCCL (gloo aborts). One launch runs every probe of
# a stage (18 trainings under ZeRO-3), the work of three launches of 600 s each before.
LAUNCH_TIMEOUT = 900


@dataclass
class ServedModel:
    """A tiny model saved in ``model_dir`` and the vLLM server process (started, maybe not ready yet) serving it."""

    model_dir: Path
    server: VLLMServerProcess

    @property
    def alive(self) -> bool:
        assert self.server.process is not None, "started"
        return self.server.process.poll() is None

    def url(self) -> str:
        """The server's base URL once it is ready; the test fails with the server's log if it does not come up."""
        try:
            self.server.wait_ready()
        except RuntimeError as error:
            pytest.fail(str(error))
        return self.server.base_url


@dataclass
class ZeroLaunch:
    """A launch of `probe_zero.py`: its ZeRO stage, output folder and, per section it ran, each process's records."""

    stage: int
    folder: Path
    sections: dict[str, list[dict[str, Any]]]


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


def launch(folder: Path, stage: int, *probe_args: str) -> ZeroLaunch:
    """Run `probe_zero.py` on two processes under ZeRO ``stage`` with arguments ``folder``, the config and
    ``probe_args``; return, per section it ran, each process's JSON. The run must exit 0."""
    config = zero_config(folder, stage)
    python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {k: v for k, v in os.environ.items() if k != "ACCELERATE_USE_CPU"}  # it would switch DeepSpeed off
    env.update({"PYTHONPATH": python_path, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", "HF_HUB_OFFLINE": "1"})
    # DeepSpeed compiles its shm op on first use; kept inside the environment (as .ci/run does), it is built once.
    env.setdefault("TORCH_EXTENSIONS_DIR", str(Path(sys.prefix) / "torch_extensions"))
    command = [
        executable("accelerate"), "launch", "--use_deepspeed", "--deepspeed_config_file", str(config),
        "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", "0", str(HERE / "probe_zero.py"), str(folder), str(config), *probe_args,
    ]  # fmt: skip
    try:
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT)
    except subprocess.TimeoutExpired as error:
        stderr = error.stderr.decode(errors="replace") if isinstance(error.stderr, bytes) else error.stderr or ""
        pytest.fail(
            f"probe_zero.py under ZeRO-{stage} did not end in {LAUNCH_TIMEOUT} s (collectives mismatched?)\n"
            + stderr[-4000:]
        )
    noise = ("Warning:", "warnings.warn(")
    stderr = "\n".join(line for line in result.stderr.splitlines() if not any(n in line for n in noise))
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout[-2000:]}\n{stderr[-6000:]}"
    sections = {
        section.name: [json.loads((section / f"rank{rank}.json").read_text()) for rank in (0, 1)]
        for section in sorted(folder.iterdir())
        if (section / "rank0.json").exists()
    }
    return ZeroLaunch(stage, folder, sections)
