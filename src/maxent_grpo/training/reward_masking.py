"""Keep dropped rows away from reward functions.

TRL calls every reward function on every row of the batch. A dropped row is not data (invariant I3), so each callable
reward function is wrapped: it is called with the kept rows only (every per-row keyword argument sliced alike, and
`log_extra` values scattered back to full rows) and reports `None` for the dropped ones, which TRL turns into NaN and
treats as unscorable (no baseline contribution, advantage 0).

Every process calls every reward function at every scoring, also a process that kept no row: it is then called with
zero rows (``prompts``, ``completions``, ``completion_ids`` and every dataset column an empty list) and must return an
empty list. A reward function may therefore run collectives across processes (a judge model sharded over them).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from trl.trainer.utils import is_async_callable

logger = logging.getLogger(__name__)

KeepProvider = Callable[[], Sequence[bool] | None]


def _split(keep: Sequence[bool] | None, num_rows: int) -> list[int] | None:
    """Indices of kept rows, or None when every row is kept."""
    if keep is None or all(keep):
        return None
    if len(keep) != num_rows:
        raise RuntimeError(f"Reward function called with {num_rows} rows but the generation step kept {len(keep)}.")
    return [i for i, k in enumerate(keep) if k]


def _subset_kwargs(kwargs: dict[str, Any], kept: list[int], num_rows: int) -> dict[str, Any]:
    subset = {}
    for key, value in kwargs.items():
        if key == "log_extra" and callable(value):
            subset[key] = _scatter_log_extra(value, kept, num_rows)
        elif isinstance(value, list) and len(value) == num_rows:
            subset[key] = [value[i] for i in kept]
        else:
            subset[key] = value
    return subset


def _scatter_log_extra(log_extra: Callable[[str, list], None], kept: list[int], num_rows: int) -> Callable:
    def log_full_rows(column: str, values: list) -> None:
        full: list[Any] = [None] * num_rows
        for index, value in zip(kept, values, strict=True):
            full[index] = value
        log_extra(column, full)

    return log_full_rows


def _scatter(values: Sequence[Any], kept: list[int], num_rows: int) -> list[Any]:
    if len(values) != len(kept):
        raise ValueError(f"Reward function returned {len(values)} rewards for {len(kept)} rows.")
    full: list[Any] = [None] * num_rows
    for index, value in zip(kept, values, strict=True):
        full[index] = value
    return full


_ROWS = ("prompts", "completions", "completion_ids")


def _trl_call(args: tuple, kwargs: dict[str, Any]) -> bool:
    """Whether a call is TRL's (the rows by keyword), not a user's own call of the function on other arguments."""
    return not args and all(key in kwargs for key in _ROWS)


def mask_dropped_rows(reward_func: Callable, keep: KeepProvider) -> Callable:
    """Wrap ``reward_func`` so it never sees rows that ``keep()`` marks as dropped (sync and async functions); it is
    called even when no row is kept, with zero rows. A call that is not TRL's (the function called directly, on other
    arguments) goes through unchanged."""

    if is_async_callable(reward_func):

        @functools.wraps(reward_func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            if not _trl_call(args, kwargs):
                return await reward_func(*args, **kwargs)
            prompts, completions, completion_ids = (kwargs.pop(key) for key in _ROWS)
            kept = _split(keep(), len(prompts))
            if kept is None:
                return await reward_func(
                    prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs
                )
            values = await reward_func(
                prompts=[prompts[i] for i in kept],
                completions=[completions[i] for i in kept],
                completion_ids=[completion_ids[i] for i in kept],
                **_subset_kwargs(kwargs, kept, len(prompts)),
            )
            return _scatter(values, kept, len(prompts))

        return async_wrapper

    @functools.wraps(reward_func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not _trl_call(args, kwargs):
            return reward_func(*args, **kwargs)
        prompts, completions, completion_ids = (kwargs.pop(key) for key in _ROWS)
        kept = _split(keep(), len(prompts))
        if kept is None:
            return reward_func(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs)
        values = reward_func(
            prompts=[prompts[i] for i in kept],
            completions=[completions[i] for i in kept],
            completion_ids=[completion_ids[i] for i in kept],
            **_subset_kwargs(kwargs, kept, len(prompts)),
        )
        return _scatter(values, kept, len(prompts))

    return wrapper


class _UnscorableRowFilter(logging.Filter):
    """Drops TRL's "All reward functions returned None" warning, which dropped rows would trigger every batch
    (`warn_unscorable_rows` gives it for kept rows)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return TRL_UNSCORABLE_WARNING not in record.getMessage()


@contextlib.contextmanager
def silence_unscorable_warning() -> Iterator[None]:
    """Silence TRL's unscorable-row warning while dropped rows (which score None by design) are being scored."""
    trl_logger = logging.getLogger("trl.trainer.grpo_trainer")
    row_filter = _UnscorableRowFilter()
    trl_logger.addFilter(row_filter)
    try:
        yield
    finally:
        trl_logger.removeFilter(row_filter)


#: The start of TRL's own warning for a completion that every reward function scored None, which the package keeps.
TRL_UNSCORABLE_WARNING = "All reward functions returned None for the following kwargs:"
#: The columns of a row that TRL does not pass to reward functions as keyword arguments of their own.
_NOT_REWARD_KWARGS = ("prompt", "completion", "completion_ids")


def warn_unscorable_rows(
    rewards_per_func: torch.Tensor,
    keep: torch.Tensor,
    inputs: Sequence[dict[str, Any]],
    prompts: Sequence[Any],
    completions: Sequence[Any],
    process_index: int,
) -> None:
    """TRL's warning for the first of this process's kept rows that every reward function scored None (NaN), with
    TRL's words and its reward arguments, and what the package adds: how many such rows, and that dropped rows (which
    score None by design, silenced while scoring by `silence_unscorable_warning`) are not among them.

    Args:
        rewards_per_func: the rewards of every process's rows, ``[N, num_funcs]``, as TRL gathers them.
        keep: every process's rows that the generation step kept, ``[N]``.
        inputs: this process's rows (TRL's reward arguments are their columns but the prompt and the completion).
        prompts: this process's prompts.
        completions: this process's completions.
        process_index: this process's place in the gathered rows (its rows follow those of the processes before it).
    """
    local = slice(process_index * len(prompts), (process_index + 1) * len(prompts))
    unscorable = torch.isnan(rewards_per_func[local]).all(dim=1) & keep[local].to(rewards_per_func.device)
    if not bool(unscorable.any()):
        return
    row = int(unscorable.nonzero()[0, 0])
    row_kwargs = {key: value for key, value in inputs[row].items() if key not in _NOT_REWARD_KWARGS}
    row_kwargs["prompt"], row_kwargs["completion"] = prompts[row], completions[row]
    logger.warning(
        "%s\n%s\nPlease ensure that at least one reward function returns a valid reward. (%d of this process's %d "
        "kept completions scored None from every reward function; they are treated as unscorable: no part in their "
        "group's baseline, advantage 0. Rows the generation step dropped score None by design and are not counted.)",
        TRL_UNSCORABLE_WARNING,
        row_kwargs,
        int(unscorable.sum()),
        int(keep[local].sum()),
    )


def unscore_dropped_rows(rewards_per_func: torch.Tensor, keep: torch.Tensor) -> None:
    """Set the rewards of dropped rows (``keep`` False, [N]) to NaN in place: reward models (``nn.Module``) score
    every row, and a dropped row is not data whatever they returned."""
    rewards_per_func[~keep.to(rewards_per_func.device)] = torch.nan
