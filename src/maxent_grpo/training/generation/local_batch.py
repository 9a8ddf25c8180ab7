"""One process's share of a generation step: its runs, what the backend returned for them, and their lengths."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from maxent_grpo.training.generation.backends.protocol import Completion, GenerationBackend
from maxent_grpo.training.generation.collect import (
    STAT_KEYS,
    AnyProcess,
    CompletionCheck,
    collect_completion_groups,
)


@dataclass
class LocalBatch:
    """The rows of one process and the completion groups collected for them.

    Attributes:
        prompts: the TRL prompt of each row, [B].
        runs: consecutive rows of one global group, [R] (see `rows.local_runs`).
        groups: completions collected for each run, [R][<= len(run)].
        complete: whether each run's group reached its size, [R].
        stats: counters summed over every collection of this step (`collect.STAT_KEYS`).
        reasons: causes of missing completions seen this step, for logs and errors.
        backend_calls: backend calls made this step (identical on every process).
    """

    prompts: list[Any]
    runs: list[range]
    groups: list[list[Completion]] = field(default_factory=list)
    complete: list[bool] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STAT_KEYS, 0))
    reasons: list[str] = field(default_factory=list)
    backend_calls: int = 0

    def __post_init__(self) -> None:
        self.groups = [[] for _ in self.runs]
        self.complete = [False] * len(self.runs)

    def collect(
        self,
        backend: GenerationBackend,
        run_indices: Sequence[int],
        *,
        retry_limit: int,
        check: CompletionCheck,
        any_process: AnyProcess,
        deadline: float | None,
    ) -> None:
        """(Re)collect the groups of the given runs, replacing what they held.

        Collective: every process calls it at the same point, with its own (possibly empty) ``run_indices``. No retry
        round starts once any process is past its ``deadline`` (a `time.monotonic` instant, or None).
        """
        collected = collect_completion_groups(
            backend,
            [self.prompts[self.runs[i].start] for i in run_indices],
            [len(self.runs[i]) for i in run_indices],
            retry_limit=retry_limit,
            check=check,
            any_process=any_process,
            deadline=deadline,
        )
        for position, index in enumerate(run_indices):
            self.groups[index] = collected.groups[position]
            self.complete[index] = collected.complete[position]
        for key in STAT_KEYS:
            self.stats[key] += collected.stats[key]
        self.reasons.extend(collected.reasons)
        self.backend_calls += collected.calls

    def row_table(self) -> list[list[int]]:
        """Per row: [complete, prompt length, completion length, last completion id] (zeros and -1 when incomplete)."""
        table = []
        for run, group, complete in zip(self.runs, self.groups, self.complete, strict=True):
            for k in range(len(run)):
                if complete:
                    completion = group[k]
                    table.append([1, len(completion.prompt_ids), len(completion.completion_ids),
                                  completion.completion_ids[-1]])  # fmt: skip
                else:
                    table.append([0, 0, 0, -1])
        return table
