"""The vllm tier: tests against the real vLLM engine and a real `vllm` server process, on CPU.

They run where vLLM is installed (`.ci/run` builds that environment: torch 2.13.0, vllm-cpu 0.31.0, this package)
and skip, saying so, elsewhere. Every test here is marked ``vllm``: ``pytest -m vllm`` runs the tier alone.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
VLLM_INSTALLED = importlib.util.find_spec("vllm") is not None

# The KV cache vLLM reserves on CPU, in GiB (its default is 4): the tiny model needs a sliver of it.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


@pytest.hookimpl(tryfirst=True)  # before `-m` selection, so `pytest -m vllm` finds them
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="vllm is not installed: the vllm tier runs in the environment .ci/run builds")
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.vllm)
            if not VLLM_INSTALLED:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def vllm_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model, wide enough for vLLM's CPU attention kernels (head_dim 64; they refuse 16), saved to disk."""
    from maxent_grpo.tiny_model import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("vllm-tiny-model"), hidden_size=256, num_layers=2)
