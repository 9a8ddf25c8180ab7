"""`ScoringLedger`: what the calls of each reward function did in one batch, and what follows from it.

The wrapped reward functions (`guarded`) report each call here. At the end of the batch's scoring, `settle` gathers
the reports of every process (one collective, made by every process alike: invariant I7), leaves the rows that a
function failed to score out of the batch (`unscored_rows`), returns the counts to log, and stops the run when one
function failed on every call of `reward_max_consecutive_failed_batches` training batches in a row. Every process
reaches the same decision from the same gathered counts.

A warning is logged once per reward function and kind of failure (a timeout, each error type, a call left unscored),
not once per row or call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from maxent_grpo.training.reward_scoring.errors import RewardFunctionGone, one_line
from maxent_grpo.training.reward_scoring.transient import is_timeout
from maxent_grpo.training.reward_scoring.unscored_rows import leave_out_unscored

logger = logging.getLogger(__name__)

#: Per-function counters of one batch: calls made, calls that failed after their retries, attempts that timed out,
#: attempts made after a failed one, kept rows left unscored, and the calls and failed calls that had rows to score.
_COUNTERS = ("calls", "failed", "timed_out", "retried", "unscored_rows", "calls_with_rows", "failed_with_rows")

#: The counters logged per reward function, as ``scoring/<name>/<counter>``.
FUNCTION_COUNTERS = ("failed", "timed_out", "retried", "unscored_rows")


@dataclass
class CallReport:
    """One call of one reward function, as `guarded` saw it.

    Attributes:
        rows: this process's rows the call scored (kept rows), [B] bool.
        attempts: attempts made (1 + retries).
        timed_out: attempts that hit ``reward_timeout``.
        errors: the transient error of each failed attempt, in order.
        failed: whether no attempt succeeded (the call's rows are unscored).
    """

    rows: list[bool]
    attempts: int = 0
    timed_out: int = 0
    errors: list[BaseException] = field(default_factory=list)
    failed: bool = False


@dataclass(frozen=True)
class Settled:
    """What a batch's scoring comes to.

    Attributes:
        keep: [N] bool, the rows that stay in the batch (the generation step's less the unscored ones).
        metrics: the `scoring/*` values to log, summed over processes.
    """

    keep: torch.Tensor
    metrics: dict[str, float]


class ScoringLedger:
    """Counts of each reward function's calls in the current batch; see the module docstring.

    Args:
        names: the reward functions' names (TRL's ``reward_func_names``), one per column of the rewards.
        max_consecutive_failed_batches: ``reward_max_consecutive_failed_batches``.
    """

    def __init__(self, names: Sequence[str], max_consecutive_failed_batches: int) -> None:
        self.names = list(names)
        self.max_consecutive_failed_batches = max_consecutive_failed_batches
        self._streaks = [0] * len(self.names)
        self._last_errors: list[BaseException | None] = [None] * len(self.names)
        self._warned: set[tuple[int, str]] = set()
        #: Whether the last `settle` left rows out (the same on every process).
        self.left_out_rows = False
        self.start_batch()

    def start_batch(self) -> None:
        """Forget the previous batch's calls (the failure streaks and warnings carry on)."""
        self._failed_rows: dict[int, list[bool]] = {}
        self._counts = [dict.fromkeys(_COUNTERS, 0) for _ in self.names]

    def record(self, index: int, report: CallReport) -> None:
        """Count a finished call of reward function ``index``; a failed call's rows become unscored, the rows of a
        later successful call of the same function (a dynamic-sampling round) scored again."""
        counts = self._counts[index]
        rows = sum(report.rows)
        counts["calls"] += 1
        counts["timed_out"] += report.timed_out
        counts["retried"] += max(report.attempts - 1, 0)
        counts["calls_with_rows"] += rows > 0
        failed_rows = self._failed_rows.setdefault(index, [False] * len(report.rows))
        for row, in_call in enumerate(report.rows):
            if in_call:
                failed_rows[row] = report.failed
        if report.errors:
            self._last_errors[index] = report.errors[-1]
        for error in report.errors:
            kind = "timed out" if is_timeout(error) else type(error).__name__
            self._warn_once(index, kind, f"reward function {self.names[index]} failed ({one_line(error)})")
        if report.failed:
            counts["failed"] += 1
            counts["unscored_rows"] += rows
            counts["failed_with_rows"] += rows > 0
            self._warn_once(
                index,
                "unscored",
                f"reward function {self.names[index]} could not score {rows} rows after {report.attempts} attempts "
                f"({one_line(report.errors[-1])}); they are left out of the update, not given a made-up reward",
            )

    def _warn_once(self, index: int, kind: str, message: str) -> None:
        if (index, kind) not in self._warned:
            self._warned.add((index, kind))
            logger.warning("%s (this warning is given once per reward function and kind of failure).", message)

    def settle(
        self,
        rewards_per_func: torch.Tensor,
        keep: torch.Tensor,
        *,
        local_rows: int,
        group_size: int,
        gather: Callable[[torch.Tensor], torch.Tensor],
        training: bool,
    ) -> Settled:
        """Leave the unscored rows out of the batch (``rewards_per_func`` [N, F] changed in place) and count.

        A collective: every process calls it once per batch, with its own ``local_rows`` (B) of the ``keep`` [N]
        rows.

        Raises:
            RewardFunctionGone: in training, a reward function failed on every call that had rows to score, on every
                process, in ``max_consecutive_failed_batches`` batches in a row.
        """
        num_funcs = len(self.names)
        failed = torch.zeros(local_rows, num_funcs)
        for index, rows in self._failed_rows.items():
            failed[:, index] = torch.tensor(rows, dtype=torch.float32)
        counts = torch.tensor([[c[key] for key in _COUNTERS] for c in self._counts], dtype=torch.float32)
        local = torch.cat([failed.flatten(), counts.flatten()]).to(rewards_per_func.device)
        gathered = gather(local).view(-1, local.numel())
        all_failed = gathered[:, : local_rows * num_funcs].reshape(-1, num_funcs) > 0
        summed = gathered[:, local_rows * num_funcs :].reshape(-1, num_funcs, len(_COUNTERS)).sum(dim=0)
        kept = leave_out_unscored(rewards_per_func, all_failed, keep, group_size)
        metrics = {"scoring/unscored_rows": float((keep.to(kept.device) & ~kept).sum().item())}
        for index, name in enumerate(self.names):
            total = dict(zip(_COUNTERS, summed[index].tolist(), strict=True))
            for key in FUNCTION_COUNTERS:
                metrics[f"scoring/{name}/{key}"] = total[key]
            if training and total["calls_with_rows"] > 0:
                gone = total["failed_with_rows"] == total["calls_with_rows"]
                self._streaks[index] = self._streaks[index] + 1 if gone else 0
        self.left_out_rows = metrics["scoring/unscored_rows"] > 0
        self.start_batch()
        for index, streak in enumerate(self._streaks):
            if streak >= self.max_consecutive_failed_batches:
                last = self._last_errors[index]
                raise RewardFunctionGone(
                    f"reward function {self.names[index]} failed on every call in {streak} consecutive batches "
                    f"(reward_max_consecutive_failed_batches={self.max_consecutive_failed_batches}); last error: "
                    f"{'unknown' if last is None else one_line(last)}"
                )
        return Settled(kept, metrics)
