"""I4, I6, I7 under DeepSpeed ZeRO-2 and ZeRO-3 (I10): two real gloo processes, `accelerate launch --use_deepspeed`.

Each launch runs a probe (in this folder) that trains several times and writes one JSON file per process; the tests
read them. A launch costs tens of seconds, so there is one per ZeRO stage for the update checks and one for call
symmetry. The ZeRO configs are written here; ``stage3_param_persistence_threshold: 0`` makes ZeRO-3 partition even the
tiny model's small parameters (the default keeps parameters under 100k elements whole on every process).
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
from tests.support.two_step_update import (
    LOSS_TYPES,
    OPTIMIZERS,
    assert_empty_step_left_no_trace,
    assert_stock_update,
)

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

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


def launch(folder: Path, probe: str, stage: int) -> list[dict[str, Any]]:
    """Run ``probe`` on two processes under ZeRO ``stage``; return each process's JSON. The run must exit 0."""
    config = zero_config(folder, stage)
    python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {k: v for k, v in os.environ.items() if k != "ACCELERATE_USE_CPU"}  # it would switch DeepSpeed off
    env.update({"PYTHONPATH": python_path, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", "HF_HUB_OFFLINE": "1"})
    # DeepSpeed compiles its shm op on first use; kept inside the environment (as .ci/run does), it is built once.
    env.setdefault("TORCH_EXTENSIONS_DIR", str(Path(sys.prefix) / "torch_extensions"))
    command = [
        executable("accelerate"), "launch", "--use_deepspeed", "--deepspeed_config_file", str(config),
        "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", "0", str(HERE / probe), str(folder), str(config),
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


@pytest.fixture(scope="module", params=[2, 3], ids=["zero2", "zero3"])
def update_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """`probe_update.py`'s runs, per process, under one ZeRO stage."""
    return [
        rank["runs"]
        for rank in launch(tmp_path_factory.mktemp(f"zero{request.param}"), "probe_update.py", request.param)
    ]


def test_a_step_without_kept_rows_changes_no_weight_and_no_optimizer_state(update_runs):
    """I4 / I6: step 2 drops every group on both processes (AdamW, weight decay 0.1). Each process's ZeRO partition
    of the master weights and of the optimizer state, and the gathered weights, stay bit-identical."""
    for runs in update_runs:
        after_one = runs["empty"][0]
        whole = 0 if after_one["zero_stage"] == 3 else after_one["num_parameters"]
        assert after_one["whole_parameters"] == whole, "ZeRO-3 partitions every parameter, ZeRO-2 none"
    assert_empty_step_left_no_trace(update_runs)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_a_process_without_kept_rows_leaves_stock_trls_update(update_runs, optimizer, loss_type):
    """I6: step 2 drops every group of process 1. The update equals stock TRL's on process 0's rows alone: the
    reference run holds those rows on both processes with nothing dropped (see `tests.support.two_step_update`)."""
    assert_stock_update(update_runs, optimizer, loss_type)


def test_faults_on_one_process_keep_zero3_generation_calls_symmetric(tmp_path):
    """I7 under ZeRO-3 with the built-in `TransformersBackend`: only process 0's generations fail, both processes
    make the same calls (the launch ends instead of aborting or hanging), agree on every drop, and stay equal."""
    rank0, rank1 = (rank["runs"] for rank in launch(tmp_path, "probe_symmetry.py", 3))
    for name in rank0:
        records0, records1 = rank0[name]["records"], rank1[name]["records"]
        assert len(records0) == len(records1) == 6, name  # 3 optimizer steps of 2 generation batches
        assert [len(r["calls"]) for r in records0] == [len(r["calls"]) for r in records1], name
        assert max(len(r["calls"]) for r in records0) > 1, f"{name}: retries or refills happened"
        assert all(r0["global_keep"] == r1["global_keep"] for r0, r1 in zip(records0, records1, strict=True)), name
        assert rank0[name]["checksum"] == rank1[name]["checksum"], name
