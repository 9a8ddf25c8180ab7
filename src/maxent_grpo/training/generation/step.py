"""One generation step of one process: collect, agree across processes, refill, lay out TRL's rows.

`GenerationStep` owns every round of a step, so it can be tested without a trainer: it takes the backend, the
completion check and the collective operations it needs, and `run` returns rows plus metrics. The trainer's side of
the step (weights, logging, episodes) is `trainer_step`.

Symmetry (invariant I7): every process makes the same sequence of backend calls and collectives whatever failed
where. The first call and each retry round are one backend call on every process (see `collect`); whether a retry
round happens is decided collectively, the step's time budget included (no retry round starts once any process has
spent it); groups are kept or dropped from one gathered table; dynamic-sampling rounds re-collect on every process, a
process without a replaced group taking part with an empty request; a backend that raised `GenerationStopped` on one
process stops the step on all of them, after the same rounds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from maxent_grpo.collectives import Collectives
from maxent_grpo.training.dynamic_sampling import DynamicSampler, RefillOutcome
from maxent_grpo.training.generation.collect import STAT_KEYS, collect_completion_groups
from maxent_grpo.training.generation.contract.capabilities import (
    SupportsDeadline,
    SupportsFailureReasons,
    SupportsStats,
)
from maxent_grpo.training.generation.contract.completion_check import CompletionCheck
from maxent_grpo.training.generation.contract.protocol import GenerationBackend, GenerationStopped
from maxent_grpo.training.generation.helpers import determine_retry_limit
from maxent_grpo.training.generation.local_batch import LocalBatch
from maxent_grpo.training.generation.rows import GeneratedRows, assemble_rows, local_runs

#: A backend's counters of weight syncs and of completions from weights older than the trainer's, logged per step
#: under ``generation/<key>`` when the backend keeps them in its ``stats`` (summed over processes).
WEIGHT_STAT_KEYS = ("weight_pushes", "weight_resyncs", "stale_completions")
#: Sums of the seconds a backend spent writing the training weights and pushing them into its servers, logged per
#: step with the counters, under ``generation/<key>``, when its ``stats`` keep them too (the maximum over processes:
#: what the step waits for).
WEIGHT_SECONDS_KEYS = ("weight_write_seconds", "weight_reload_seconds")
#: The prefix of a server pool's per-server counters (`vllm_server_pool`), logged with the weight counters.
SERVER_STAT_PREFIX = "servers/"


def weight_counts(backend: GenerationBackend) -> dict[str, float] | None:
    """The backend's weight-sync counters (`WEIGHT_STAT_KEYS`, whole numbers), its seconds (`WEIGHT_SECONDS_KEYS`,
    those it keeps) and its per-server counters (`SERVER_STAT_PREFIX`), when it keeps the counters (the vLLM server
    backend and server pool)."""
    stats = backend.stats if isinstance(backend, SupportsStats) else None
    if not isinstance(stats, dict) or not all(key in stats for key in WEIGHT_STAT_KEYS):
        return None
    keys = [*WEIGHT_STAT_KEYS, *sorted(key for key in stats if key.startswith(SERVER_STAT_PREFIX))]
    return {key: int(stats[key]) for key in keys} | {
        key: float(stats[key]) for key in WEIGHT_SECONDS_KEYS if key in stats
    }


@dataclass(frozen=True)
class GroupAgreement:
    """Which groups every process kept.

    Attributes:
        table: gathered row table (complete, prompt length, completion length, last id), [N, 4].
        group_kept: whether each global group is complete on every process, [N / G].
        global_keep: ``group_kept`` per row, [N].
        keep: this process's slice of ``global_keep``, [B].
    """

    table: torch.Tensor
    group_kept: torch.Tensor
    global_keep: torch.Tensor
    keep: list[bool]


#: ``score(prompts, rows, agreement, rows_to_score) -> rewards_per_func`` [N, F] for the whole batch (a collective).
#: ``rows_to_score`` None is the final scoring of the whole batch: what reward functions log in it replaces what they
#: logged in the refill rounds.
RowScorer = Callable[[list[Any], GeneratedRows, GroupAgreement, Sequence[bool] | None], torch.Tensor]


@dataclass
class RefillResult:
    """What dynamic sampling left: the final agreement, the rewards of the final rows [N, F], and its counters."""

    agreement: GroupAgreement
    rewards_per_func: torch.Tensor
    outcome: RefillOutcome


@dataclass(frozen=True)
class Refill:
    """Dynamic sampling's part of a step: the sampler, the batch's dataset rows (replaced in place), the scorer, and
    whether a reward function logged a metric on this process (see `GenerationStep.refill`)."""

    sampler: DynamicSampler
    inputs: list[dict[str, Any]]
    score: RowScorer
    logged_metrics: Callable[[], bool]


@dataclass(frozen=True)
class StepResult:
    """What one step left on this process.

    Attributes:
        prompts: the step's requests [B], dynamic sampling's replacements in place of the groups it replaced.
        rows: TRL's rows [B].
        agreement: the groups every process kept.
        metrics: the step's metrics.
        refilled: what dynamic sampling left, or None without it.
        reasons: why slots came back missing (see `GenerationStep.reasons`).
    """

    prompts: list[Any]
    rows: GeneratedRows
    agreement: GroupAgreement
    metrics: StepMetrics
    refilled: RefillResult | None
    reasons: list[str]


class GenerationStep:
    """The rounds of one generation step on one process; see the module docstring.

    Args:
        backend: the generation backend.
        check: why a completion is unusable, or None (invariant I5).
        collectives: the process group's collectives.
        group_size: G, completions per prompt.
        max_retry_rounds: retry rounds after the first call; 0 disables retries, None means G rounds.
        placeholder_prompt_id / placeholder_completion_id: token ids of the rows of dropped groups.
        step_timeout: seconds the step's backend calls may take, counted from the step's creation; None: no limit.
            Once spent, no retry round starts (on any process) and what is still missing is dropped; a
            `SupportsDeadline` backend (the vLLM server backend) also cuts its requests off at the deadline. A call
            that cannot be interrupted (local generation) runs to its end.
        counts_before: the backend's weight counters (`weight_counts`) as they stood before this step's weights were
            written (the trainer writes them before it creates the step), so that the write is this step's; None: as
            they stand when the step is created.
    """

    def __init__(
        self,
        backend: GenerationBackend,
        *,
        check: CompletionCheck,
        collectives: Collectives,
        group_size: int,
        max_retry_rounds: int | None,
        placeholder_prompt_id: int,
        placeholder_completion_id: int,
        step_timeout: float | None = None,
        counts_before: dict[str, float] | None = None,
    ) -> None:
        self.backend = backend
        self.check = check
        self.collectives = collectives
        self.group_size = group_size
        self.retry_limit = 0 if max_retry_rounds == 0 else determine_retry_limit(group_size, max_retry_rounds)
        self.placeholder_prompt_id = placeholder_prompt_id
        self.placeholder_completion_id = placeholder_completion_id
        self.deadline = None if step_timeout is None else time.monotonic() + step_timeout
        self._backend_counts = weight_counts(backend) if counts_before is None else counts_before

    def run(self, requests: list[Any], *, stop_ids: Sequence[int], refill: Refill | None = None) -> StepResult:
        """The whole step: collect (with retries), agree, refill with ``refill``, assemble, and the metrics
        (``stop_ids``: the ids that end a completion; a kept completion ending otherwise counts as clipped)."""
        batch = self.collect(requests)
        agreement = self.agree(batch)
        refilled = None
        if refill is not None:
            refilled = self.refill(
                batch, agreement, refill.sampler, refill.inputs, refill.score, logged_metrics=refill.logged_metrics
            )
            agreement = refilled.agreement
        rows = self.assemble(batch, agreement)
        metrics = self.metrics(batch, agreement, stop_ids)
        return StepResult(batch.prompts, rows, agreement, metrics, refilled, self.reasons(batch))

    def collect(self, prompts: list[Any]) -> LocalBatch:
        """First call plus retries for this process's rows (TRL's layout: G consecutive rows per prompt)."""
        runs = local_runs(len(prompts), self.collectives.process_index * len(prompts), self.group_size)
        batch = LocalBatch(prompts, runs)
        self.recollect(batch, range(len(runs)))
        return batch

    def recollect(self, batch: LocalBatch, run_indices: Sequence[int]) -> None:
        """Collect the given runs again (collective: a process with no run to collect still takes part).

        No retry round starts once any process is past the step's deadline. When a backend call raised
        `GenerationStopped` on any process, every process raises it, with that message, once the rounds are over."""
        run_indices = list(run_indices)
        with self._backend_deadline():
            collected = collect_completion_groups(
                self.backend,
                [batch.prompts[batch.runs[i].start] for i in run_indices],
                [len(batch.runs[i]) for i in run_indices],
                retry_limit=self.retry_limit,
                check=self.check,
                any_process=self.collectives.any,
                deadline=self.deadline,
            )
        if self.collectives.any(collected.stopped is not None):
            local = None if collected.stopped is None else str(collected.stopped)
            stopped = [message for message in self.collectives.gather_object([local]) if message]
            if collected.stopped is not None:
                raise collected.stopped  # its own type (`BackendContractError` is also a ValueError)
            raise GenerationStopped(stopped[0])
        batch.merge(run_indices, collected)

    @contextmanager
    def _backend_deadline(self) -> Iterator[None]:
        """Tell a backend that can bound its requests (`SupportsDeadline`) the step's deadline while it is called."""
        backend = self.backend
        if not isinstance(backend, SupportsDeadline) or self.deadline is None:
            yield
            return
        backend.set_deadline(self.deadline)
        try:
            yield
        finally:
            backend.set_deadline(None)

    def reasons(self, batch: LocalBatch) -> list[str]:
        """Why slots of ``batch`` came back missing: the rounds' own reasons, then the backend's
        (`SupportsFailureReasons`: an episode backend says why each failed episode did)."""
        backend = self.backend
        return [*batch.reasons, *(backend.reasons if isinstance(backend, SupportsFailureReasons) else ())]

    def agree(self, batch: LocalBatch) -> GroupAgreement:
        """Decide, identically on every process, which groups are complete everywhere (one gather)."""
        collectives = self.collectives
        table = collectives.gather(torch.tensor(batch.row_table(), dtype=torch.long, device=collectives.device))
        group_kept = table[:, 0].view(-1, self.group_size).bool().all(dim=1)
        global_keep = group_kept.repeat_interleave(self.group_size)
        start = collectives.process_index * len(batch.prompts)
        keep = global_keep[start : start + len(batch.prompts)].tolist()
        return GroupAgreement(table, group_kept, global_keep, keep)

    def assemble(self, batch: LocalBatch, agreement: GroupAgreement) -> GeneratedRows:
        """TRL's rows for this process; rows of dropped groups get placeholders and ``keep=False``."""
        return assemble_rows(
            batch.runs,
            batch.groups,
            agreement.keep,
            placeholder_prompt_id=self.placeholder_prompt_id,
            placeholder_completion_id=self.placeholder_completion_id,
        )

    def refill(
        self,
        batch: LocalBatch,
        agreement: GroupAgreement,
        sampler: DynamicSampler,
        inputs: list[dict[str, Any]],
        score: RowScorer,
        *,
        logged_metrics: Callable[[], bool],
    ) -> RefillResult:
        """Dynamic sampling: replace groups without learning signal (prompts and ``inputs`` rows in place).

        Rows scored in an earlier round keep their rewards; rows of dropped groups score NaN. No refill round starts
        once any process is past the step's deadline. A metric a reward function logs (``log_metric``,
        ``logged_metrics()`` True on some process) is a statistic of the rows of one call, so once a round has replaced
        groups the final rows are scored once more, as a whole, and that scoring's rewards, columns and metrics are the
        batch's.
        """
        current = agreement
        rewards: torch.Tensor | None = None

        def score_rows(rows_to_score: Sequence[bool] | None) -> tuple[torch.Tensor, torch.Tensor]:
            nonlocal rewards
            fresh = score(batch.prompts, self.assemble(batch, current), current, rows_to_score)
            scored_rows = [True] * len(batch.prompts) if rows_to_score is None else list(rows_to_score)
            local = torch.tensor(scored_rows, dtype=torch.bool, device=self.collectives.device)
            scored = self.collectives.gather(local).to(fresh.device)
            merged = fresh if rewards is None else torch.where(scored.unsqueeze(1), fresh, rewards)
            merged[~current.global_keep.to(merged.device)] = torch.nan
            rewards = merged
            return merged, current.group_kept

        def regenerate(local_rows: list[int]) -> torch.Tensor:
            nonlocal current
            replaced = set(local_rows)
            self.recollect(batch, [i for i, run in enumerate(batch.runs) if run.start in replaced])
            current = self.agree(batch)
            return current.group_kept

        outcome = sampler.refill(
            group_size=self.group_size,
            row_offset=self.collectives.process_index * len(batch.prompts),
            inputs=inputs,
            prompts=batch.prompts,
            score=score_rows,
            regenerate=regenerate,
            out_of_time=None if self.deadline is None else self._out_of_time,
        )
        if outcome.rounds and self.collectives.any(logged_metrics()):
            score_rows(None)
        assert rewards is not None  # refill scores at least once
        return RefillResult(current, rewards, outcome)

    def _out_of_time(self) -> bool:
        """Whether any process is past the step's deadline (a collective)."""
        assert self.deadline is not None
        return self.collectives.any(time.monotonic() >= self.deadline)

    def metrics(self, batch: LocalBatch, agreement: GroupAgreement, stop_ids: Sequence[int]) -> StepMetrics:
        """Robustness counters summed over processes (the weight push's seconds: their maximum), and completion
        statistics over kept rows only."""
        collectives = self.collectives
        counts: list[float] = [batch.stats[key] for key in STAT_KEYS]
        before, after = self._backend_counts, weight_counts(self.backend)
        weight_keys = tuple(after) if before is not None and after is not None else ()
        counts += [after[key] - before[key] for key in weight_keys]
        keys = (*STAT_KEYS, *weight_keys)
        local_stats = torch.tensor(counts, dtype=torch.float64, device=collectives.device)
        all_stats = collectives.gather(local_stats).view(-1, len(keys))
        totals = dict(zip(keys, all_stats.sum(dim=0).tolist(), strict=True))
        totals |= {key: all_stats[:, keys.index(key)].max().item() for key in WEIGHT_SECONDS_KEYS if key in keys}
        values = {
            "generation/dropped_prompts": float((~agreement.group_kept).sum().item()),
            "generation/retried_prompts": float(totals["retried_prompts"]),
            "generation/retry_rounds": float(all_stats[:, STAT_KEYS.index("retry_rounds")].max().item()),
            "generation/invalid_completions": float(totals["invalid_completions"]),
            "generation/backend_errors": float(totals["backend_errors"]),
        }
        values |= {f"generation/{key}": float(totals[key]) for key in weight_keys}
        kept = agreement.table[agreement.global_keep]
        if kept.numel() == 0:
            return StepMetrics(values, kept_tokens=0)
        lengths = kept[:, 2].float()
        is_truncated = ~torch.isin(kept[:, 3], torch.tensor(list(stop_ids), device=kept.device))
        terminated = lengths[~is_truncated]
        if terminated.numel() == 0:
            terminated = torch.zeros(1, device=kept.device)
        values |= {
            "completions/mean_length": lengths.mean().item(),
            "completions/min_length": lengths.min().item(),
            "completions/max_length": lengths.max().item(),
            "completions/clipped_ratio": is_truncated.float().mean().item(),
            "completions/mean_terminated_length": terminated.mean().item(),
            "completions/min_terminated_length": terminated.min().item(),
            "completions/max_terminated_length": terminated.max().item(),
        }
        return StepMetrics(values, kept_tokens=int(kept[:, 1].sum().item() + kept[:, 2].sum()))


@dataclass(frozen=True)
class StepMetrics:
    """Metrics of one generation step: logged values, and the kept tokens (all processes)."""

    values: dict[str, float]
    kept_tokens: int
