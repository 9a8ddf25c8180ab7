"""The vLLM worker extension that lets a vLLM server reload the training weights from a directory, checked.

A server started with ``--worker-extension-cls maxent_grpo.training.generation.backends.server_reload_extension.
DiskReloadExtension`` (and ``VLLM_SERVER_DEV_MODE=1`` for ``POST /collective_rpc``) gains one worker method,
``maxent_reload_weights(weights_path)``: it reads every ``*.safetensors`` file of ``weights_path`` and reloads the
engine's model from them in place (`in_place_reload`: tied layers processed again), then reports what it loaded and
which engine parameters stayed stale. vLLM's own ``reload_weights`` cannot be trusted with a tied LM head (it skips it
and the engine ends up half-updated) and reports nothing.

A server told which directory to trust (``maxent-grpo vllm-serve --weights-root DIR``, which sets
``MAXENT_GRPO_WEIGHTS_ROOT``) refuses a ``weights_path`` outside it (symbolic links resolved): whoever can reach
``/collective_rpc`` can then make the engine load only what the trainer writes there.

This module runs inside the server's engine process; it imports nothing of the trainer.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from maxent_grpo.training.generation.backends.in_place_reload import reload_in_place

#: The ``--worker-extension-cls`` value that loads `DiskReloadExtension`.
EXTENSION_QUALNAME = f"{__name__}.DiskReloadExtension"
#: The method `DiskReloadExtension` adds to vLLM's workers (named so that it cannot clash with vLLM's own).
RELOAD_METHOD = "maxent_reload_weights"
#: The environment variable naming the only directory (and what is under it) the extension loads weights from.
WEIGHTS_ROOT_VARIABLE = "MAXENT_GRPO_WEIGHTS_ROOT"


def check_trusted(weights_path: str) -> Path:
    """``weights_path`` resolved; PermissionError when ``MAXENT_GRPO_WEIGHTS_ROOT`` names a directory it is not in."""
    path = Path(weights_path).resolve()
    root = os.environ.get(WEIGHTS_ROOT_VARIABLE)
    if root and not path.is_relative_to(Path(root).resolve()):
        raise PermissionError(f"{weights_path!r} is outside the directory this server trusts for weights ({root!r})")
    return path


def _read_safetensors(files: list[Path]) -> Iterator[tuple[str, torch.Tensor]]:
    from safetensors import safe_open

    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 (a safetensors handle is not a dict)
                yield name, handle.get_tensor(name)


class DiskReloadExtension:
    """Mixed into vLLM's worker class by ``--worker-extension-cls``; ``self`` is the worker."""

    model_runner: Any
    vllm_config: Any

    def maxent_reload_weights(self, weights_path: str) -> dict[str, Any]:
        """Reload the model from the safetensors files of ``weights_path``; return ``{"tensors": n, "stale": [...]}``.

        ``stale`` names the engine parameters that received no new values, or only part of them (empty: complete).
        Raises FileNotFoundError when ``weights_path`` holds no safetensors file (a directory the server cannot see),
        PermissionError when it is outside the directory the server trusts (`check_trusted`).
        """
        from vllm.config import set_current_vllm_config

        files = sorted(check_trusted(weights_path).glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"no *.safetensors file in {weights_path!r} as the vLLM server sees it")
        count = 0

        def counted() -> Iterator[tuple[str, torch.Tensor]]:
            nonlocal count
            for item in _read_safetensors(files):
                count += 1
                yield item

        runner = self.model_runner
        with set_current_vllm_config(self.vllm_config):
            stale = reload_in_place(runner.get_model(), runner.model_config, counted())
        return {"tensors": count, "stale": stale}
