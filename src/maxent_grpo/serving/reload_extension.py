"""The vLLM worker extension that lets a vLLM server reload the training weights from a directory, checked.

A server started with ``--worker-extension-cls maxent_grpo.serving.reload_extension.
DiskReloadExtension`` (and ``VLLM_SERVER_DEV_MODE=1`` for ``POST /collective_rpc``) gains one worker method,
``maxent_reload_weights(weights_path, version, keep)``: it reads the safetensors files of ``weights_path`` and
reloads the engine's model from them in place (`in_place_reload`: tied layers processed again), then reports what it
loaded, which engine parameters stayed stale, whether the engine caches prefixes (a cache the caller must then empty)
and how long reading and reloading took. vLLM's own ``reload_weights`` cannot be trusted with a tied LM head (it skips
it and the engine ends up half-updated) and reports nothing.

The reload is one engine call, run between two scheduler steps (the engine core runs utility calls and model steps
one after the other), so no forward pass ever sees half of one version and half of another: generation needs no pause
around it.

Deltas (`weight_delta`). With ``keep="1"`` the worker keeps the tensors it loaded, a host copy of the weights, as the
base of the next version (named ``version``). A directory holding ``delta-*.safetensors`` files is applied to that
copy and the engine reloaded from the result; a delta whose base is not the one held (after a restart, or a reload
that failed) is refused with `DELTA_BASE_MISSING` in its message, and the caller sends the whole version instead.

Every file a reload opens is resolved (symbolic links followed) and must lie inside the directory the request names,
itself resolved: a link inside a version's directory cannot bring in a file from elsewhere. A server told which
directory to trust (``maxent-grpo vllm-serve --weights-root DIR``, which sets ``MAXENT_GRPO_WEIGHTS_ROOT``) also
refuses a ``weights_path`` outside ``DIR``, so whoever can reach ``/collective_rpc`` can make the engine load only
what the trainer writes there; without ``--weights-root`` the root is the directory each request names, and any
directory the server's user can read may be named (on a server reachable beyond this machine, give both
``--weights-root`` and ``--api-key``). vLLM's own worker methods (``reload_weights`` from any path,
``save_sharded_state`` into any folder, ...) never get here: the server's guard refuses every ``/collective_rpc``
method but this extension's (`key_guard`).

Weights whose shapes do not fit the served model (a trainer pointed at a server of another model) are refused before
the engine is touched (`check_shapes`, against the safetensors files the server was started from): vLLM's loaders
would fail part-way through the reload, with no message, and leave the engine unable to load anything again.

This module runs inside the server's engine process; it imports nothing of the trainer.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from maxent_grpo.serving.in_place_reload import reload_in_place
from maxent_grpo.serving.weight_delta import BASE_KEY, apply_delta

#: The ``--worker-extension-cls`` value that loads `DiskReloadExtension`.
EXTENSION_QUALNAME = f"{__name__}.DiskReloadExtension"
#: The environment variable naming the only directory (and what is under it) the extension loads weights from.
WEIGHTS_ROOT_VARIABLE = "MAXENT_GRPO_WEIGHTS_ROOT"
#: In the message of a delta refused because the server does not hold its base.
DELTA_BASE_MISSING = "the server does not hold the base of this delta"


def check_trusted(weights_path: str) -> Path:
    """``weights_path`` resolved; PermissionError when ``MAXENT_GRPO_WEIGHTS_ROOT`` names a directory it is not in."""
    path = Path(weights_path).resolve()
    root = os.environ.get(WEIGHTS_ROOT_VARIABLE)
    if root and not path.is_relative_to(Path(root).resolve()):
        raise PermissionError(f"{weights_path!r} is outside the directory this server trusts for weights ({root!r})")
    return path


def check_inside(files: list[Path], folder: Path) -> list[Path]:
    """``files`` resolved (symbolic links followed); PermissionError naming the first that lies outside ``folder``
    (a resolved directory: the one a reload was asked to read)."""
    resolved = [file.resolve() for file in files]
    for file, target in zip(files, resolved, strict=True):
        if not target.is_relative_to(folder):
            raise PermissionError(
                f"{str(file)!r} leads outside the weights directory {str(folder)!r} (to {str(target)!r})"
            )
    return resolved


def checkpoint_shapes(files: list[Path]) -> dict[str, tuple[int, ...]]:
    """Each tensor's shape in the safetensors ``files``, read from their headers (no tensor is loaded)."""
    from safetensors import safe_open

    shapes = {}
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 (a safetensors handle is not a dict)
                shapes[name] = tuple(handle.get_slice(name).get_shape())
    return shapes


def check_shapes(pushed: Mapping[str, tuple[int, ...]], served: Mapping[str, tuple[int, ...]]) -> None:
    """ValueError naming the tensors of ``pushed`` whose shape differs from the same name's in ``served``.

    Names that only one side has are left alone (a checkpoint with a tied LM head may or may not store it).
    """
    differ = [f"{name} {list(shape)} (served: {list(served[name])})" for name, shape in pushed.items()
              if name in served and served[name] != shape]  # fmt: skip
    if differ:
        raise ValueError(
            f"the pushed weights do not fit the served model: {len(differ)} tensors differ in shape, "
            f"{'; '.join(differ[:3])}{'; ...' if len(differ) > 3 else ''}; train the model the server was started with"
        )


def checkpoint_files(folder: Path) -> list[Path]:
    """The safetensors files of the checkpoint in ``folder``: those its ``model.safetensors.index.json`` names when
    it has one (a leftover file beside the shards is not part of it), else every ``*.safetensors`` file."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        return sorted({folder / name for name in json.loads(index.read_text())["weight_map"].values()})
    return sorted(folder.glob("*.safetensors"))


@functools.lru_cache(maxsize=1)
def _served_shapes(model: str) -> dict[str, tuple[int, ...]]:
    """The shapes of the checkpoint the server was started from: a local directory, or a Hub id's snapshot in the
    local cache (where vLLM downloaded it); empty when neither is found."""
    folder = Path(model)
    if not folder.is_dir():
        from huggingface_hub import snapshot_download

        try:
            folder = Path(snapshot_download(model, local_files_only=True, allow_patterns=["*.safetensors*"]))
        except (OSError, ValueError):  # not in the cache, or not a Hub id: nothing to compare against
            return {}
    return checkpoint_shapes(checkpoint_files(folder))


def _read_safetensors(files: list[Path], *, own: bool = False) -> dict[str, torch.Tensor]:
    """The tensors of ``files``. safetensors maps each file and its tensors read from the mapping, which keeps a
    file's pages alive after the file is removed: with ``own``, for tensors that outlive the reload (the held copy),
    each is copied into memory of its own so that a removed version gives its room back."""
    from safetensors import safe_open

    tensors = {}
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 (a safetensors handle is not a dict)
                tensor = handle.get_tensor(name)
                tensors[name] = tensor.clone() if own else tensor
    return tensors


def _delta_base(file: Path) -> str | None:
    from safetensors import safe_open

    with safe_open(str(file), framework="pt") as handle:
        return (handle.metadata() or {}).get(BASE_KEY)


@dataclass
class _Held:
    """The worker's host copy of the weights it loaded last, and their version."""

    version: str
    tensors: dict[str, torch.Tensor]


class DiskReloadExtension:
    """Mixed into vLLM's worker class by ``--worker-extension-cls``; ``self`` is the worker."""

    model_runner: Any
    vllm_config: Any
    _maxent_held: _Held | None = None

    def maxent_reload_weights(self, weights_path: str, version: str = "", keep: str = "") -> dict[str, Any]:
        """Reload the model from the safetensors files of ``weights_path`` (a whole version, or a delta against the
        version held); keep them as the next delta's base (named ``version``) when ``keep`` is non-empty.

        Returns ``{"tensors", "stale", "prefix_caching", "delta", "seconds": {"read", "reload"}}``: the tensors
        loaded, the engine parameters that received no new values, or only part of them, in ``stale`` (empty:
        complete), whether the engine caches prefixes, whether a delta was applied.
        Raises FileNotFoundError when ``weights_path`` holds no safetensors file (a directory the server cannot see),
        PermissionError when it is outside the directory the server trusts (`check_trusted`) or one of its files
        leads outside it (`check_inside`; nothing is loaded then), ValueError when its shapes do not fit the served
        model (`check_shapes`) or a delta does not fit the copy held, RuntimeError with `DELTA_BASE_MISSING` for a
        delta whose base is not held. After any other failure, or a reload that left something stale, no copy is
        held.
        """
        from vllm.config import set_current_vllm_config

        began = time.perf_counter()
        folder = check_trusted(weights_path)
        deltas = check_inside(sorted(folder.glob("delta-*.safetensors")), folder)
        files = deltas or check_inside(sorted(folder.glob("*.safetensors")), folder)
        if not files:
            raise FileNotFoundError(f"no *.safetensors file in {weights_path!r} as the vLLM server sees it")
        held, self._maxent_held = self._maxent_held, None
        if deltas:
            base = _delta_base(deltas[0])
            if held is None or held.version != base:
                holding = "no version" if held is None else f"version {held.version!r}"
                raise RuntimeError(f"{DELTA_BASE_MISSING} ({base!r}): it holds {holding}")
            apply_delta(held.tensors, _read_safetensors(deltas, own=True))
            tensors = held.tensors
        else:
            check_shapes(checkpoint_shapes(files), _served_shapes(str(self.vllm_config.model_config.model)))
            tensors = _read_safetensors(files, own=bool(keep))
        read = time.perf_counter()
        runner = self.model_runner
        with set_current_vllm_config(self.vllm_config):
            # The tensors stay as they are until the reload returns (mapped from their files, or the held copy, which
            # only the next call's delta changes): vLLM needs no copy of them.
            stale = reload_in_place(runner.get_model(), runner.model_config, tensors.items(), copy=False)
        if keep and not stale:
            self._maxent_held = _Held(version, tensors)
        return {
            "tensors": len(tensors),
            "stale": stale,
            "prefix_caching": bool(self.vllm_config.cache_config.enable_prefix_caching),
            "delta": bool(deltas),
            "seconds": {"read": read - began, "reload": time.perf_counter() - read},
        }
