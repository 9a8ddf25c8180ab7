"""The deepspeed tier: two gloo processes under DeepSpeed ZeRO-2 / ZeRO-3 on CPU (``DS_ACCELERATOR=cpu``).

They run where DeepSpeed is installed (`.ci/run` builds that environment: torch 2.13.0, deepspeed 0.19.8 installed
with ``DS_BUILD_OPS=0``, this package) and skip, saying so, elsewhere. Every test here is marked ``deepspeed``.

A launch and a vLLM server start cost tens of seconds each, so the tier makes few of them, shared through two session
fixtures: `vllm_servers` starts both servers the tests use at once, in the background, when the first launch begins
(the tied tiny model for ZeRO, an untied one for FSDP2, see `test_server_weights`); `zero_launch` makes one launch per
ZeRO stage (`probe_zero.py`: every probe for that stage in the same two processes, the server probe last, once the
server has had the other probes' time to come up) and gives each section's records to the tests of both modules.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from maxent_grpo.tiny_model import save_tiny_model
from tests.deepspeed.launcher import ROOT, ServedModel, ZeroLaunch, launch
from tests.support.real_vllm_server import VLLMServerProcess

HERE = Path(__file__).resolve().parent
DEEPSPEED_INSTALLED = importlib.util.find_spec("deepspeed") is not None
#: The interpreter of an environment with vLLM, which runs the servers (`.ci/run` sets it to the vllm tier's).
SERVER_PYTHON = os.environ.get("VLLM_SERVER_PYTHON")


@pytest.hookimpl(tryfirst=True)  # before `-m` selection, so `pytest -m deepspeed` finds them
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(
        reason="deepspeed is not installed: the deepspeed tier runs in the environment .ci/run builds"
    )
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.deepspeed)
            if not DEEPSPEED_INSTALLED:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def vllm_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServedModel]]:
    """``tied`` and ``untied``: the tiny model (wide enough for vLLM's CPU attention kernels: head_dim 64) with and
    without a tied output layer, each with a server for it with the disk transport, both started now and not waited
    for. Empty without ``VLLM_SERVER_PYTHON``: the server tests skip then, the other probes run without them."""
    if SERVER_PYTHON is None:
        yield {}
        return
    python_path = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    served: dict[str, ServedModel] = {}
    try:
        for name, tied in (("tied", True), ("untied", False)):
            model_dir = save_tiny_model(
                tmp_path_factory.mktemp(f"{name}-model"), hidden_size=256, num_layers=2, tie_word_embeddings=tied
            )
            server = VLLMServerProcess(
                model_dir, weight_transfer="disk", python=SERVER_PYTHON, extra_env={"PYTHONPATH": python_path}
            )
            served[name] = ServedModel(Path(model_dir), server.start())
        yield served
    finally:
        for model in served.values():
            model.server.close()


@pytest.fixture(scope="session", params=[2, 3], ids=["zero2", "zero3"])
def zero_launch(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, vllm_servers: dict[str, ServedModel]
) -> ZeroLaunch:
    """The launch of `probe_zero.py` under ZeRO ``request.param``, with its sections ``update``, ``symmetry`` (ZeRO-3
    only) and ``server_weights``. The server section is left out when there is no server, or when the server has
    already exited (its test fails then, with the server's log)."""
    stage = request.param
    folder = tmp_path_factory.mktemp(f"zero{stage}")
    tied = vllm_servers.get("tied")
    served = (str(tied.model_dir), tied.server.base_url) if tied is not None and tied.alive else ()
    return launch(folder, stage, *served)
