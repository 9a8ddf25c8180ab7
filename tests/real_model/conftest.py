"""The real-model tier: SmolLM2-135M-Instruct (`maxent_grpo.smollm2`) through every backend, on CPU.

It runs in the vllm tier's environment (`.ci/run` builds it: torch 2.13.0, vllm-cpu 0.31.0, this package with its
``smollm2`` extra) and skips, saying so, elsewhere: the main suite stays on the in-process tiny model. The model
folder is built once into the cache (`smollm2_dir`, under a lock: the tier's workers share it) and verified before
each session uses it. Every test here is marked ``real_model``.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from maxent_grpo.smollm2 import smollm2_dir

HERE = Path(__file__).resolve().parent
VLLM_INSTALLED = importlib.util.find_spec("vllm") is not None

# The KV cache vLLM reserves on CPU, in GiB (its default is 4): 1 holds this tier's short prompts many times over.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(
        reason="the real-model tier runs in the vllm environment .ci/run builds (vllm-cpu and the smollm2 extra)"
    )
    for item in items:
        if HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.real_model)
            if not VLLM_INSTALLED:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def real_model_dir() -> Path:
    """The fp32 SmolLM2-135M-Instruct folder, built on first use and verified."""
    return smollm2_dir()


@pytest.fixture(scope="module", autouse=True)
def _environment_restored():
    """Each module leaves ``os.environ`` as it found it (TRL's colocate engine sets RANK, MASTER_PORT, ...)."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)
