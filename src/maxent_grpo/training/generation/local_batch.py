"""One process's share of a generation step: its runs, what the backend returned for them, and their lengths."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from maxent_grpo.training.generation.collect import STAT_KEYS, CollectedGroups
from maxent_grpo.training.generation.contract.protocol import Completion


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

    def merge(self, run_indices: Sequence[int], collected: CollectedGroups) -> None:
        """Make ``collected`` (one collection, its groups in the order of ``run_indices``) the groups of those runs,
        and add its counters to the step's."""
        for position, index in enumerate(run_indices):
            self.groups[index] = collected.groups[position]
            self.complete[index] = collected.complete[position]
        for key in STAT_KEYS:
            self.stats[key] += collected.stats[key]
        self.reasons.extend(collected.reasons)
        self.backend_calls += collected.calls

    def row_table(self) -> list[list[int]]:
        """Per row: [complete, prompt length, completion length, last completion id] (zeros and -1 when incomplete).

        The completion length counts the tokens the model wrote (``tool_mask`` 1), as TRL's length metrics do."""
        table = []
        for run, group, complete in zip(self.runs, self.groups, self.complete, strict=True):
            for k in range(len(run)):
                if complete:
                    completion = group[k]
                    mask = completion.tool_mask
                    length = len(completion.completion_ids) if mask is None else sum(mask)
                    table.append([1, len(completion.prompt_ids), length, completion.completion_ids[-1]])
                else:
                    table.append([0, 0, 0, -1])
        return table
