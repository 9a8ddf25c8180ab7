"""TRL's batch metrics over kept rows only (invariants I3, I6): what TRL computed over every row, placeholders
included, recomputed or forgotten once a generation batch has dropped groups.

Each function takes the trainer's metric store (``GRPOTrainer._metrics[mode]``: name -> list of logged values) or its
completions table (``GRPOTrainer._logs``) and the rows' keep mask; none of them knows the trainer.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict, deque
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import Any

import torch
from trl.trainer.utils import nanmax, nanmin, nanstd

from maxent_grpo.training.kept_rows import ROW_KEEP_KEY

Metrics = dict[str, list[float]]


def forget_metrics(metrics: Metrics, names: list[str], logged_before: Mapping[str, int]) -> None:
    """Remove the values of ``names`` logged since ``logged_before`` (a metric left without values is absent)."""
    for name in names:
        del metrics[name][logged_before.get(name, 0) :]
        if not metrics[name]:
            del metrics[name]


#: What TRL logs during a loss call that is the state of a controller, not a measurement of the micro-batch's rows.
CONTROLLER_METRICS = frozenset({"entropy_coef"})


def forget_placeholder_metrics(metrics: Metrics, logged_before: Mapping[str, int]) -> None:
    """A loss call on placeholder rows only (no process held data): forget what it measured, keep controller state."""
    forget_metrics(metrics, [name for name in metrics if name not in CONTROLLER_METRICS], logged_before)


def forget_unkept_batch(metrics: Metrics, logged_before: Mapping[str, int]) -> None:
    """A batch without a single kept row: its reward and sampling metrics are absent, not NaN or 0."""
    names = [name for name in metrics if name.startswith(("reward", "frac_reward_zero_std", "sampling/"))]
    forget_metrics(metrics, names, logged_before)


def restrict_zero_std_fraction(
    metrics: Metrics,
    rewards_per_func: torch.Tensor,
    reward_weights: torch.Tensor,
    global_keep: torch.Tensor,
    group_size: int,
) -> None:
    """`frac_reward_zero_std` over kept groups: TRL counts a dropped (all-NaN) group as having spread.

    Only for TRL's per-group reward scaling (``sum_then_normalize`` without ``scale_rewards="batch"``), G >= 2.
    """
    weights = reward_weights.to(rewards_per_func.device)
    rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
    rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
    std = nanstd(rewards.view(-1, group_size), dim=1)
    group_kept = global_keep.view(-1, group_size).any(dim=1).to(std.device)  # a partly unscored group counts
    zero = torch.isclose(std, torch.zeros_like(std))[group_kept]
    metrics["frac_reward_zero_std"][-1] = zero.float().mean().item()


def restrict_sampling_metrics(
    metrics: Metrics, output: dict[str, Any], gather: Callable[[torch.Tensor], torch.Tensor]
) -> None:
    """TRL's `sampling/*` statistics over kept rows, a process without any left out (TRL counts it as 0, and counts
    a placeholder's sequence-level ratio as 1.0). Collective (one gather)."""
    keep = output[ROW_KEEP_KEY]
    mask = output["completion_mask"].bool() & keep.unsqueeze(1)
    if "tool_mask" in output:
        mask &= output["tool_mask"].bool()
    delta = torch.abs(output["old_per_token_logps"] - output["sampling_per_token_logps"])
    delta = delta[mask & ~torch.isnan(delta)]
    ratio = output["importance_sampling_ratio"]
    ratio = ratio[keep].flatten() if ratio.shape[1] == 1 else ratio[mask]

    def local_stats(values: torch.Tensor, *reducers: str) -> list[torch.Tensor]:
        if values.numel() == 0:
            return [values.new_tensor(torch.nan) for _ in reducers]
        return [getattr(values.float(), reducer)() for reducer in reducers]

    local = torch.stack([*local_stats(delta, "mean", "max"), *local_stats(ratio, "min", "mean", "max")])
    gathered = gather(local.unsqueeze(0).float())
    values = {
        "sampling/sampling_logp_difference/mean": gathered[:, 0].nanmean(),
        "sampling/sampling_logp_difference/max": nanmax(gathered[:, 1]),
        "sampling/importance_sampling_ratio/min": nanmin(gathered[:, 2]),
        "sampling/importance_sampling_ratio/mean": gathered[:, 3].nanmean(),
        "sampling/importance_sampling_ratio/max": nanmax(gathered[:, 4]),
    }
    for name, value in values.items():
        metrics[name][-1] = value.item()


COLUMNS = ("prompt", "completion", "advantages", "images")
GROUPS_OF_COLUMNS = ("rewards", "extra")


@contextlib.contextmanager
def completion_logs_of_one_batch(logs: dict[str, Any]) -> Iterator[Callable[[list[bool]], None]]:
    """TRL's completions table while one batch is logged in it; yields ``keep_rows(keep)``, which forgets the
    placeholder rows of that batch (``keep`` over its rows, all processes).

    The table's columns are deques of at most ``generation_batch_size`` rows, and an eval batch can be larger: while
    the batch is logged they hold all of it, so that the kept rows are chosen among every row of the batch, and the
    earlier rows that remain are those the whole batch left (with TRL's own bound, a training batch replaces the
    whole table); on leaving, each column is bounded again. A column the batch did not add to (images of a text
    batch) is left as it is.
    """
    maxlen = logs["prompt"].maxlen
    for name in COLUMNS:
        logs[name] = deque(logs[name])
    for name in GROUPS_OF_COLUMNS:
        logs[name] = defaultdict(deque, {column: deque(values) for column, values in logs[name].items()})
    lengths_before = {id(column): len(column) for column in _columns(logs)}

    def keep_rows(keep: list[bool]) -> None:
        for column in _columns(logs):
            if len(column) - lengths_before.get(id(column), 0) == len(keep):
                tail = [column.pop() for _ in keep][::-1]
                while maxlen is not None and len(column) > max(maxlen - len(keep), 0):
                    column.popleft()
                column.extend(value for value, kept in zip(tail, keep, strict=True) if kept)

    try:
        yield keep_rows
    finally:
        for name in COLUMNS:
            logs[name] = deque(logs[name], maxlen=maxlen)
        for name in GROUPS_OF_COLUMNS:
            bounded = defaultdict(partial(deque, maxlen=maxlen))
            bounded.update({column: deque(values, maxlen=maxlen) for column, values in logs[name].items()})
            logs[name] = bounded


def _columns(logs: dict[str, Any]) -> list[deque]:
    return [logs[name] for name in COLUMNS] + [column for name in GROUPS_OF_COLUMNS for column in logs[name].values()]


def restrict_batch_metrics(
    metrics: Metrics,
    logged_before: Mapping[str, int],
    output: dict[str, Any],
    global_keep: torch.Tensor,
    rewards_per_func: torch.Tensor | None,
    trainer: Any,
    group_size: int,
) -> None:
    """TRL's metrics of the batch a `GRPOTrainer` just scored (its rewards ``rewards_per_func``, [N, F]), over its
    kept rows (``global_keep``, [N]) only: absent when none is kept, else `frac_reward_zero_std` over kept groups
    (TRL's per-group scaling) and, with TRL's importance-sampling correction, its `sampling/*` statistics (a
    collective)."""
    if not bool(global_keep.any()):
        forget_unkept_batch(metrics, logged_before)
        return
    per_group = trainer.multi_objective_aggregation == "sum_then_normalize" and trainer.scale_rewards != "batch"
    if per_group and group_size >= 2:
        restrict_zero_std_fraction(metrics, rewards_per_func, trainer.reward_weights, global_keep, group_size)
    if trainer.use_vllm and trainer.vllm_importance_sampling_correction:
        restrict_sampling_metrics(metrics, output, trainer.accelerator.gather)


def replace_logged_advantages(logs: dict[str, Any], advantages: list[float]) -> None:
    """Make the completions table show the advantages that train (the listwise ones) instead of the GRPO ones TRL
    logged for the batch's last ``len(advantages)`` rows."""
    logged = logs["advantages"]
    for _ in range(min(len(advantages), len(logged))):
        logged.pop()
    logged.extend(advantages)
