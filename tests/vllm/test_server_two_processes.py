"""Two gloo processes training against one real `vllm` server on 127.0.0.1 (the session's, `shared_server`).

One ``accelerate launch`` runs the whole-model variants of `tests/distributed/probe_server.py` (``ddp``, ``async``,
``async-fault``; each a fresh trainer that pushes its own weights first) and the tests below read both processes'
records: process 0 alone pushes and both agree on the version; with asynchronous generation both generate ahead with
one pusher, and a fault on process 1's call ahead is retried at its step. The multi-node test
(`tests/vllm/test_multi_node_namespaces.py`) checks the same records of a launch over the network.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.distributed.test_two_processes import launch_server_variants
from tests.support.real_vllm_server import SharedVLLMServer
from tests.support.server_logprobs import assert_one_pusher_on_policy

pytestmark = pytest.mark.distributed

VARIANTS = ("ddp", "async", "async-fault")


@pytest.fixture(scope="module")
def two_process_server_runs(
    _session_server: SharedVLLMServer, vllm_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, list[dict]]:
    """Per variant, both processes' records of one launch against the shared server."""
    _session_server.reset()
    folder = tmp_path_factory.mktemp("two-processes")
    return launch_server_variants(folder, str(vllm_model_dir), _session_server.base_url, VARIANTS)


def test_two_processes_share_one_server_only_process_0_pushes_and_both_agree_on_the_version(two_process_server_runs):
    rank0, rank1 = two_process_server_runs["ddp"]
    assert_one_pusher_on_policy(rank0, rank1)


def check_generated_ahead_with_one_pusher(runs: dict[str, list[dict]], variant: str) -> None:
    """The checks of an ``async`` or ``async-fault`` launch's records, ``runs[variant]`` (both processes')."""
    rank0, rank1 = runs[variant]
    print(f"two processes, {variant}: {rank0}")
    for name in ("staleness_max", "staleness_mean", "backend_errors", "retried_prompts", "dropped_prompts"):
        assert rank0[name] == rank1[name], name  # every logged value is the processes' common one
    assert rank0["rows_seen"] == rank1["rows_seen"] == 3 * 6 and rank0["dropped_prompts"] == [0, 0, 0]
    assert rank0["staleness_max"] == [0.0, 1.0, 1.0]
    # Step 1's weights for steps 1 and 2, step 2's for step 3 (step 3's own are never needed: nothing was retried).
    assert rank1["weight_pushes"] == 0
    if variant == "async":
        assert rank0["weight_pushes"] == 2 and rank0["staleness_mean"] == [0.0, 1.0, 1.0]
        return
    # Process 1's call ahead for step 2 raised: its rows were generated at step 2 itself, from step 2's weights
    # (process 0 pushed them in that retry round, which it joined with nothing to ask), process 0's came from the call
    # ahead; the call ahead for step 3 found step 2's weights served already.
    assert rank0["backend_errors"][1] == 1 and rank0["retried_prompts"][1] > 0
    assert 0 < rank0["staleness_mean"][1] < 1 and rank0["staleness_mean"][2] == 1.0
    assert rank0["weight_pushes"] == 2


@pytest.mark.parametrize("variant", ["async", "async-fault"])
def test_two_processes_generate_ahead_with_one_pusher(two_process_server_runs, variant):
    check_generated_ahead_with_one_pusher(two_process_server_runs, variant)
