"""vLLM's in-place weight reload, checked: every engine parameter gets new values, tied layers included.

vLLM on CPU packs each linear layer's weight into a kernel handle after loading and drops the weight, so writing into
parameters afterwards reaches nothing; its reload (``reload_weights``: ``initialize_layerwise_reload``, the model's
``load_weights``, ``finalize_layerwise_reload``) restores each layer, loads it and processes it again, which packs the
new weights. Two gaps are closed here:

- **Tied layers.** A layer whose weight is another layer's (an LM head tied to the embedding) is skipped by the
  reload and keeps its old packed copy; it is processed again afterwards.
- **Warnings that are not failures.** vLLM warns "<layer>: Failed to load weights" for every layer the checkpoint
  gave nothing: the tied LM head ("ParallelLMHead", processed again here) and layers with no parameters of their own
  whose buffers vLLM builds itself ("RotaryEmbedding": its cos/sin cache). On every push of a real model's weights
  both appear although nothing failed; they are left out (`ExpectedReloadWarnings`), while a layer with parameters
  that got nothing still warns, and is named in what `reload_in_place` returns.
- **Partial loads.** ``reload_weights`` only logs the engine parameters that received nothing, as a warning (which TRL
  silences). `reload_in_place` returns them, and the layers that received only part of their values, so that a
  caller can refuse a partial update instead of letting it pass as a sync.
- **Failed loads.** A load that raises part-way leaves vLLM's per-layer progress behind, and the next reload would
  then report a complete load with some weights never written; `reload_in_place` ends such a reload first.

Used by the colocated engine (`colocate_engine.ReloadWeightSync`) and inside a vLLM server by the worker extension
(`reload_extension`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

import torch

#: The logger of vLLM's layerwise reload, which warns "Failed to load weights" for a layer that got nothing.
RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"
_FAILED_LOAD = "%s: Failed to load weights"


class ExpectedReloadWarnings(logging.Filter):
    """Drops vLLM's "Failed to load weights" records for the layer classes given: layers that a complete update
    leaves without new values by design (tied to another layer, or without parameters of their own)."""

    def __init__(self, layer_classes: set[str]) -> None:
        super().__init__()
        self.layer_classes = layer_classes

    def filter(self, record: logging.LogRecord) -> bool:
        expected = record.msg == _FAILED_LOAD and bool(record.args) and record.args[0] in self.layer_classes
        return not expected


def reload_in_place(
    model: torch.nn.Module,
    model_config: Any,
    named_tensors: Iterable[tuple[str, torch.Tensor]],
    *,
    copy: bool = True,
) -> list[str]:
    """Reload ``model`` (a vLLM model) from ``named_tensors`` (checkpoint names) in place; return what stayed stale.

    The result names the engine parameters that received no new values and the layers that received only part of
    them (one of q/k/v into a fused ``qkv_proj``); empty when the update is complete. With ``copy`` (the default)
    vLLM is given a copy of each tensor: vLLM holds a layer's tensors until all of them have arrived, and a sharded
    walk (FSDP, ZeRO-3) frees each gathered tensor as it moves on, a host copy may be changed in place by the next
    delta. ``copy=False`` saves that copy (a fifth of the reload on a CPU engine) for tensors that stay as they are
    until this returns, such as tensors read from files.
    """
    from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload

    with torch.no_grad():
        initialize_layerwise_reload(model)
        try:
            loaded = set(model.load_weights(_owned(named_tensors) if copy else named_tensors))
            partial = _partly_loaded_layers(model)
        except BaseException:
            _abandon_reload(model, model_config)
            raise
        tied = {type(layer).__name__ for layer in _tied_layers(model)}
        expected = ExpectedReloadWarnings(tied | _parameterless_layers(model))
        reload_logger = logging.getLogger(RELOAD_LOGGER)
        reload_logger.addFilter(expected)
        try:
            finalize_layerwise_reload(model, model_config)
        finally:
            reload_logger.removeFilter(expected)
        for layer in _tied_layers(model):
            layer.quant_method.process_weights_after_loading(layer)
    return sorted({name for name, _ in model.named_parameters()} - loaded) + partial


def _abandon_reload(model: torch.nn.Module, model_config: Any) -> None:
    """End a reload that failed part-way so that the next one starts afresh: every layer still waiting for weights
    forgets what it was given and gets its engine tensors back (with the values of the version before; layers the
    failed reload completed keep the new ones, so the engine holds no version until a reload succeeds). Without
    this, vLLM's per-layer progress outlives the failure: the next reload skips those layers' set-up, replays the
    failed reload's buffered tensors, processes each layer before all of its new weights arrived and reports a
    complete load."""
    from vllm.model_executor.model_loader.reload import finalize_layerwise_reload
    from vllm.model_executor.model_loader.reload.layerwise import get_layerwise_info

    for layer in model.modules():
        info = get_layerwise_info(layer)
        if info.can_load():
            info.loaded_weights.clear()
            info.load_numel = 0
    finalize_layerwise_reload(model, model_config)


def _tied_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Layers whose weight is another, earlier layer's weight (an LM head tied to the embedding)."""
    owners: set[int] = set()
    tied = []
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if not isinstance(weight, torch.nn.Parameter) or getattr(module, "quant_method", None) is None:
            continue
        if id(weight) in owners:
            tied.append(module)
        owners.add(id(weight))
    return tied


def _parameterless_layers(model: torch.nn.Module) -> set[str]:
    """Class names of the layers with buffers but no parameters of their own (rotary embeddings), whose classes no
    layer with parameters shares."""
    without, with_parameters = set(), set()
    for module in model.modules():
        name = type(module).__name__
        if next(module.parameters(recurse=False), None) is not None:
            with_parameters.add(name)
        elif next(module.buffers(recurse=False), None) is not None:
            without.add(name)
    return without - with_parameters


def _owned(named_tensors: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
    """Copies of the tensors (`reload_in_place`'s ``copy``)."""
    for name, tensor in named_tensors:
        yield name, tensor.detach().clone()


def _partly_loaded_layers(model: torch.nn.Module) -> list[str]:
    """Layers that received some but not all of their weights: vLLM counts a fused parameter as loaded and would
    process the layer with the rest uninitialised. Called before ``finalize_layerwise_reload``, while each layer's
    loading progress is still recorded. Vocabulary embeddings and LM heads are left out: their rows are padded beyond
    the checkpoint's vocabulary, so they are never loaded whole."""
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding
    from vllm.model_executor.model_loader.reload.layerwise import get_layerwise_info

    partial = []
    for name, layer in model.named_modules():
        if isinstance(layer, VocabParallelEmbedding):
            continue
        info = get_layerwise_info(layer)
        if info.can_load() and 0 < info.load_numel < (info.load_numel_total or 0):
            partial.append(f"{name} ({info.load_numel} of {info.load_numel_total} values)")
    return partial
