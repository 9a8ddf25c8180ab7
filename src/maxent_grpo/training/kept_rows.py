"""Run TRL's loss on the kept rows of a micro-batch only (invariant I6: a dropped row leaves no trace).

Dropped rows travel through TRL as placeholders so that every process keeps its shapes (I1). TRL's loss would count
them: `grpo`, `sapo` and `luspo` average over rows and `dr_grpo` divides by rows x `max_completion_length`, so the
kept rows' gradient would shrink with the drop rate; and TRL's logged means fall back to unmasked means when a tensor
has one column (sequence-level importance sampling, or one-token completions), so placeholders would enter `kl`,
`entropy` and the clip ratios. Masking cannot fix either, so the trainer hands TRL's `_compute_loss` the micro-batch
with the placeholder rows removed: the loss, its normalisers and its metrics are then exactly TRL's on the kept rows.

Two things must stay collective for that: processes may now hold different row counts, and a process may hold no kept
row at all. TRL's metric collectives assume equal shapes, so while the loss runs `metric_collectives` pads what each
process gathers to the largest row count with NaN (TRL reduces those gathers with nan-aware min / max / mean). A
process without a kept row still runs the loss (forward and backward are collective under DDP, FSDP and ZeRO-3) on one
placeholder row, its loss multiplied by zero, and contributes nothing to any metric.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

#: Per-row tensors of a TRL GRPO micro-batch (dim 0 is the row).
PER_ROW_KEYS = (
    "prompt_ids",
    "prompt_mask",
    "completion_ids",
    "completion_mask",
    "advantages",
    "old_per_token_logps",
    "importance_sampling_ratio",
    "sampling_per_token_logps",
    "ref_per_token_logps",
    "tool_mask",
)

#: Key under which the trainer stores, per row, whether it is data (bool [B]).
ROW_KEEP_KEY = "row_keep"

#: Keys whose first dimension is not the row (images): dropping rows from such a batch is not supported.
MULTIMODAL_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "pixel_attention_mask",
    "spatial_shapes",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
    "num_images",
    "num_tiles",
)


def select_rows(inputs: dict[str, Any], rows: torch.Tensor) -> dict[str, Any]:
    """The micro-batch restricted to ``rows`` (indices [K]); scalars such as ``num_items_in_batch`` are shared."""
    present = [key for key in MULTIMODAL_KEYS if inputs.get(key) is not None]
    if present:
        raise RuntimeError(
            f"A micro-batch with image inputs ({', '.join(present)}) lost prompt groups to generation failures; "
            "dropping rows of multimodal batches is not supported. Set generation_max_retries higher or fix the "
            "backend."
        )
    selected = dict(inputs)
    for key in (*PER_ROW_KEYS, ROW_KEEP_KEY):
        value = inputs.get(key)
        if isinstance(value, torch.Tensor):
            selected[key] = value.index_select(0, rows.to(value.device))
    return selected


@contextlib.contextmanager
def metric_collectives(
    accelerator: Any, *, contributes: bool, rows: int, keep_reduce: Callable[[torch.Tensor], bool]
) -> Iterator[None]:
    """Make TRL's metric collectives work on row subsets; see the module docstring.

    Inside TRL's loss, `gather` and `reduce` compute metrics, with two exceptions that feed the loss or state that
    spans micro-batches: the entropy-quantile mask gathers a tensor it first passed through
    `pad_across_processes` (equal sizes already), and the adaptive-entropy window is reduced as one stored tensor.
    Those pass unchanged; every other gather and reduce is treated as a metric. `gather_for_metrics` (the MoE
    auxiliary loss, which TRL averages without skipping NaN) gathers every process's value as it is.

    Args:
        accelerator: the trainer's `Accelerator`; its ``gather``, ``reduce``, ``pad_across_processes`` and
            ``gather_for_metrics`` are replaced for the duration.
        contributes: False on a process without a kept row: its metric gathers become NaN and its reduces zero.
        rows: the largest row count any process passes to the loss; gathered per-row metrics are NaN-padded to it.
        keep_reduce: reductions that must pass unchanged (state that spans micro-batches).
    """
    names = ("gather", "reduce", "pad_across_processes", "gather_for_metrics")
    saved = {name: accelerator.__dict__[name] for name in names if name in accelerator.__dict__}
    gather, reduce, pad_across_processes, gather_for_metrics = (getattr(accelerator, name) for name in names)
    padded_by_caller: list[torch.Tensor] = []

    def recording_pad(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        result = pad_across_processes(tensor, *args, **kwargs)
        padded_by_caller.append(result)
        return result

    def metric_gather(tensor: Any) -> Any:
        exempt = any(tensor is padded for padded in padded_by_caller)
        if exempt or not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
            return gather(tensor)
        if tensor.ndim == 0:
            return gather(tensor if contributes else torch.full_like(tensor, torch.nan))
        missing = rows - tensor.shape[0] if contributes else rows
        filler = tensor.new_full((missing, *tensor.shape[1:]), torch.nan)
        return gather(torch.cat([tensor, filler]) if contributes else filler)

    def unchanged_gather_for_metrics(data: Any, *args: Any, **kwargs: Any) -> Any:
        return gather(data) if isinstance(data, torch.Tensor) else gather_for_metrics(data, *args, **kwargs)

    def metric_reduce(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        if contributes or not isinstance(tensor, torch.Tensor) or keep_reduce(tensor):
            return reduce(tensor, *args, **kwargs)
        return reduce(torch.zeros_like(tensor), *args, **kwargs)

    replacements = (metric_gather, metric_reduce, recording_pad, unchanged_gather_for_metrics)
    for name, replacement in zip(names, replacements, strict=True):
        setattr(accelerator, name, replacement)
    try:
        yield
    finally:
        for name in names:
            if name in saved:
                setattr(accelerator, name, saved[name])
            else:
                delattr(accelerator, name)
