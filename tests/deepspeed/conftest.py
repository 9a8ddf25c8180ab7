"""The deepspeed tier: two gloo processes under DeepSpeed ZeRO-2 / ZeRO-3 on CPU (``DS_ACCELERATOR=cpu``).

They run where DeepSpeed is installed (`.ci/run` builds that environment: torch 2.13.0, deepspeed 0.19.8 installed
with ``DS_BUILD_OPS=0``, this package) and skip, saying so, elsewhere. Every test here is marked ``deepspeed``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
DEEPSPEED_INSTALLED = importlib.util.find_spec("deepspeed") is not None


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
