"""I4, I6, I7 under DeepSpeed ZeRO-2 and ZeRO-3 (I10): two real gloo processes, `accelerate launch --use_deepspeed`.

The session fixture `zero_launch` (conftest) makes one launch per ZeRO stage, of `probe_zero.py`, which trains
several times in the same two processes, section by section (the update runs, under ZeRO-3 the call-symmetry runs,
then the server runs of `test_server_weights`), and writes one JSON file per section and process; the tests read them
(`tests.deepspeed.launcher` writes the ZeRO configs).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.deepspeed.launcher import ZeroLaunch
from tests.support.two_step_update import (
    LOSS_TYPES,
    OPTIMIZERS,
    assert_empty_step_left_no_trace,
    assert_stock_update,
)

pytestmark = [pytest.mark.slow, pytest.mark.distributed]


@pytest.fixture
def update_runs(zero_launch: ZeroLaunch) -> list[dict[str, Any]]:
    """`probe_update.py`'s runs, per process, under one ZeRO stage (``zero_launch`` is parametrized over both)."""
    return [rank["runs"] for rank in zero_launch.sections["update"]]


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


@pytest.mark.parametrize("zero_launch", [3], ids=["zero3"], indirect=True)
def test_faults_on_one_process_keep_zero3_generation_calls_symmetric(zero_launch: ZeroLaunch):
    """I7 under ZeRO-3 with the built-in `TransformersBackend`: only process 0's generations fail, both processes
    make the same calls (the launch ends instead of aborting or hanging), agree on every drop, and stay equal."""
    rank0, rank1 = (rank["runs"] for rank in zero_launch.sections["symmetry"])
    for name in rank0:
        records0, records1 = rank0[name]["records"], rank1[name]["records"]
        assert len(records0) == len(records1) == 6, name  # 3 optimizer steps of 2 generation batches
        assert [len(r["calls"]) for r in records0] == [len(r["calls"]) for r in records1], name
        assert max(len(r["calls"]) for r in records0) > 1, f"{name}: retries or refills happened"
        assert all(r0["global_keep"] == r1["global_keep"] for r0, r1 in zip(records0, records1, strict=True)), name
        assert rank0[name]["checksum"] == rank1[name]["checksum"], name
