"""The first call of a generation step made ahead, in the background, and its replay in the step itself.

`first_call` is the call `GenerationStep.collect` makes first for one process's rows; `Prefetch` is one such call
made on another thread (what it returned or raised, how long it took); `ReplayedFirstCall` is the backend a step
collects from when its first call was made ahead: the first call is answered from the `Prefetch`, fresh completions
only, and every later call (retry rounds, refills) is the backend's own. See `async_generation` for when calls are
made ahead and what "fresh" means.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from maxent_grpo.training.generation.contract.capabilities import SupportsDeadline, SupportsStats
from maxent_grpo.training.generation.contract.protocol import Completion, GenerationBackend
from maxent_grpo.training.generation.rows import local_runs


@dataclass(frozen=True)
class FirstCall:
    """The first backend call of one process's generation step: one prompt per run of rows, and its row count."""

    prompts: list[Any]
    counts: list[int]


def first_call(prompts: Sequence[Any], process_index: int, group_size: int) -> FirstCall:
    """The first call `GenerationStep.collect` makes for this process's ``prompts`` (TRL's rows, G per group)."""
    runs = local_runs(len(prompts), process_index * len(prompts), group_size)
    return FirstCall([copy.deepcopy(prompts[run.start]) for run in runs], [len(run) for run in runs])


@dataclass
class Prefetch:
    """One first call made ahead, in the background.

    Attributes:
        step: TRL's micro-step whose generation it is for.
        call: the call made, as the step will make it.
        sent: its prompts as sent to the backend (token ids, tokenized on the main thread, where the backend can).
        stats_before: the backend's weight counters (`weight_counts`) before the weights it generates from were
            written, or None.
        groups / error: what the call returned, or what it raised.
        seconds: how long the call took.
    """

    step: int
    call: FirstCall
    sent: list[Any]
    stats_before: dict[str, float] | None
    groups: list[list[Completion]] | None = None
    error: BaseException | None = None
    seconds: float = 0.0
    cancelled: bool = False
    thread: threading.Thread | None = field(default=None, repr=False)


class ReplayedFirstCall:
    """A backend whose first call is answered from a `Prefetch` (exactly as the call would have gone: the groups it
    returned, or the exception it raised), its fresh completions only; every later call is the backend's own.

    Its ``stats`` are the backend's counters as they stood when the prefetch started, until the first call is
    answered, so a generation step counts the weight pushes the prefetch made (and their seconds).
    """

    def __init__(self, backend: GenerationBackend, prefetch: Prefetch, fresh: Callable[[Completion], bool]) -> None:
        self.backend = backend
        self.prefetch: Prefetch | None = prefetch
        self.fresh = fresh
        self.seconds = prefetch.seconds
        self.too_stale = 0

    @property
    def stats(self) -> dict[str, float] | None:
        if self.prefetch is not None:
            return self.prefetch.stats_before
        return self.backend.stats if isinstance(self.backend, SupportsStats) else None

    def set_deadline(self, deadline: float | None) -> None:
        if isinstance(self.backend, SupportsDeadline):
            self.backend.set_deadline(deadline)

    def generate(self, prompts: list[Any], counts: list[int]) -> list[list[Completion]]:
        prefetch, self.prefetch = self.prefetch, None
        if prefetch is None or FirstCall(prompts, counts) != prefetch.call:
            return self.backend.generate(prompts, counts)
        if prefetch.error is not None:
            raise prefetch.error
        assert prefetch.groups is not None
        groups = [[c for c in group if self.fresh(c)] for group in prefetch.groups]
        self.too_stale += sum(len(group) for group in prefetch.groups) - sum(len(group) for group in groups)
        return groups
