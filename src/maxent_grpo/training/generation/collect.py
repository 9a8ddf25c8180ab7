"""Turn what a backend returns into complete completion groups: first call, retry rounds, trimming, drop decisions.

This is the per-process half of the trainer's generation step, in pure Python (no torch) so it can be tested on its
own. It asks the backend once for every prompt, then retries the prompts still short for just their deficits, and
finally trims and drops groups, on each bucket of prompts that expect the same count (a process holds at most three:
the tail of a group that started on the previous process, whole groups, and the head of a group that continues on
the next one).

Rounds are collective (invariant I7): each round makes exactly one backend call, covering every bucket, and whether a
retry round happens at all is decided through ``any_process``: only when some process still has a short group and,
with a time budget, no process has spent it. A process with nothing left to ask still makes the call, with empty
lists, so that a backend whose generation is a collective (HF ``generate`` under ZeRO-3 / FSDP) runs the same number
of times on every process.

How the seed helpers (`maxent_grpo.training.generation.helpers`) are used, per bucket: an `AggregatedGenerationState`
holds the bucket's completion texts and, as their aligned metadata, the `Completion` objects themselves (ids,
log-probs: what the trainer needs; the texts are what the helpers align and count); `pending_generation_indices`
says which prompts a round asks for and `append_completion_group` merges each answer into its own prompt's group;
`truncate_to_expected_counts`, `drop_empty_prompt_groups` and `drop_incomplete_prompt_groups` decide which groups
survive, with the prompts' positions as the "answers" they keep aligned (the step's inputs, which carry the answers,
are re-aligned from those positions). One helper is not used: `retry_incomplete_prompts` runs its own retry loop over
one prompt list with one expected count and stops as soon as that list has nothing pending, while here a round must
cover every bucket in one call and run on every process until no process has anything pending (I7); its per-round
merge is the same `append_completion_group` call made here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from maxent_grpo.training.generation.contract.protocol import Completion, GenerationBackend, GenerationStopped
from maxent_grpo.training.generation.helpers import (
    AggregatedGenerationState,
    append_completion_group,
    drop_empty_prompt_groups,
    drop_incomplete_prompt_groups,
    pending_generation_indices,
    seed_generation_groups,
    truncate_to_expected_counts,
)

logger = logging.getLogger(__name__)

#: ``reject(completion)``: why the completion is unusable, or None when it is fine (what
#: `contract.completion_check.CompletionCheck` computes; any such callable will do here).
CompletionFilter = Callable[[Completion], str | None]

#: ``any_process(flag)``: True when ``flag`` is True on any process (a collective; identity on one process).
AnyProcess = Callable[[bool], bool]

STAT_KEYS = ("retried_prompts", "retry_rounds", "dropped_prompts", "invalid_completions", "backend_errors")


def single_process(flag: bool) -> bool:
    """`AnyProcess` for a run with one process."""
    return flag


@dataclass
class CollectedGroups:
    """Outcome of collecting completions for one process's prompts.

    Attributes:
        groups: per requested prompt, its completions (exactly ``counts[i]`` when complete). len = num prompts.
        complete: per requested prompt, whether its group reached the requested count. len = num prompts.
        stats: counters named in `STAT_KEYS` (retried prompts, retry rounds, locally dropped prompts, invalid
            completions discarded, backend calls that raised).
        reasons: human-readable causes seen while collecting (backend errors, invalid completions), for logs.
        calls: backend calls made (the same on every process for the same ``retry_limit``).
        stopped: the `GenerationStopped` a backend call raised (the step stops), or None.
    """

    groups: list[list[Completion]]
    complete: list[bool]
    stats: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STAT_KEYS, 0))
    reasons: list[str] = field(default_factory=list)
    calls: int = 0
    stopped: GenerationStopped | None = None


class _BackendCaller:
    """Calls the backend, turning its failures into missing slots and filtering unusable completions."""

    def __init__(self, backend: GenerationBackend, check: CompletionFilter, result: CollectedGroups) -> None:
        self.backend = backend
        self.check = check
        self.result = result

    def __call__(self, prompts: Sequence[Any], counts: Sequence[int]) -> list[list[Completion]]:
        self.result.calls += 1
        try:
            returned = self.backend.generate(list(prompts), list(counts))
        except GenerationStopped as error:  # not a missing-slot fault: the step stops once every process knows
            self.result.stopped = error
            return [[] for _ in prompts]
        except Exception as error:  # the protocol: any backend failure makes every slot of the call missing
            self.result.stats["backend_errors"] += 1
            self.result.reasons.append(f"backend raised {type(error).__name__}: {error}")
            logger.warning(
                "Generation backend raised %s: %s; its %d prompts are retried.",
                type(error).__name__,
                error,
                len(prompts),
                exc_info=logger.isEnabledFor(logging.DEBUG),
            )
            return [[] for _ in prompts]
        if len(returned) != len(prompts):
            raise ValueError(
                f"Generation backend {type(self.backend).__name__} returned {len(returned)} groups for "
                f"{len(prompts)} prompts; a backend must return exactly one (possibly short) group per prompt."
            )
        groups = []
        for group, count in zip(returned, counts, strict=True):
            kept = []
            for completion in group[:count]:
                problem = self.check(completion)
                if problem is None:
                    kept.append(completion)
                else:
                    self.result.stats["invalid_completions"] += 1
                    self.result.reasons.append(problem)
            groups.append(kept)
        return groups


@dataclass
class _Bucket:
    """Prompts of one expected count and the state the seed helpers update for them."""

    expected: int
    indices: list[int]
    state: AggregatedGenerationState

    def pending(self) -> list[int]:
        return pending_generation_indices(self.state.completions, self.expected)


def _round(caller: _BackendCaller, prompts: Sequence[Any], buckets: list[_Bucket]) -> None:
    """One round: a single backend call for the deficits of every bucket (in prompt order), each answer appended to
    its own prompt.

    The call is made even when nothing is pending here (see the module docstring). The caller trims each group to
    the count asked, so nothing appended overfills a group.
    """
    asked = sorted(
        ((bucket, position) for bucket in buckets for position in bucket.pending()),
        key=lambda item: item[0].indices[item[1]],
    )
    answers = caller(
        [prompts[bucket.indices[position]] for bucket, position in asked],
        [bucket.expected - len(bucket.state.completions[position]) for bucket, position in asked],
    )
    for (bucket, position), group in zip(asked, answers, strict=True):
        state = bucket.state
        state.metadata = append_completion_group(
            state.completions, state.metadata, position, [c.text for c in group], list(group)
        )


def _survivors(bucket: _Bucket, prompts: Sequence[Any], stats: dict[str, int]) -> tuple[list[int], list[list[Any]]]:
    """The bucket's prompts whose group is complete (their positions in ``prompts``) and every group, trimmed."""
    texts, metadata, _ = truncate_to_expected_counts(bucket.state.completions, bucket.state.metadata, bucket.expected)
    metadata = metadata if metadata is not None else [[] for _ in texts]
    kept = drop_empty_prompt_groups([prompts[i] for i in bucket.indices], list(bucket.indices), texts, metadata, stats)
    _, survivors, _, _, _ = drop_incomplete_prompt_groups(*kept, bucket.expected, stats)
    return survivors, metadata


def collect_completion_groups(
    backend: GenerationBackend,
    prompts: Sequence[Any],
    counts: Sequence[int],
    *,
    retry_limit: int,
    check: CompletionFilter,
    any_process: AnyProcess = single_process,
    deadline: float | None = None,
) -> CollectedGroups:
    """Ask ``backend`` for ``counts[i]`` completions of each ``prompts[i]`` and return complete groups where possible.

    Guarantees: ``groups[i]`` only ever holds completions the backend produced for ``prompts[i]`` (never another
    prompt's); no group is longer than ``counts[i]``; a completion rejected by ``check`` counts as missing; a prompt
    still short after the retries is marked incomplete (its partial group is kept for inspection, not for training).
    At most ``retry_limit`` retry rounds follow the first call (0 disables retries), and none starts once any process
    is past its ``deadline`` (a `time.monotonic` instant; None: no time limit). Every process must pass the same
    ``retry_limit``, ``any_process`` collective and kind of ``deadline`` (all None or none), and then makes the same
    number of backend calls.
    """
    if len(prompts) != len(counts):
        raise ValueError(f"Got {len(prompts)} prompts but {len(counts)} counts.")
    result = CollectedGroups(groups=[], complete=[])
    caller = _BackendCaller(backend, check, result)
    buckets = []
    for expected in sorted(set(counts)):
        indices = [i for i, count in enumerate(counts) if count == expected]
        texts, metadata = seed_generation_groups(len(indices), None, [[] for _ in indices])
        buckets.append(_Bucket(expected, indices, AggregatedGenerationState(texts, metadata)))
    _round(caller, prompts, buckets)  # the first call: every prompt is pending

    retried: set[int] = set()
    for _ in range(retry_limit):
        pending = [bucket.indices[position] for bucket in buckets for position in bucket.pending()]
        if not any_process(bool(pending)):
            break
        if deadline is not None and any_process(time.monotonic() >= deadline):
            if pending:
                result.reasons.append("the generation step's time budget was spent")
                logger.warning(
                    "The generation step's time budget is spent: no further retry round; %d prompts still short here "
                    "are dropped.",
                    len(pending),
                )
            break
        retried.update(pending)
        result.stats["retry_rounds"] += 1
        _round(caller, prompts, buckets)
    result.stats["retried_prompts"] += len(retried)

    result.groups = [[] for _ in prompts]
    result.complete = [False] * len(prompts)
    for bucket in buckets:
        survivors, metadata = _survivors(bucket, prompts, result.stats)
        for position, index in enumerate(bucket.indices):
            result.groups[index] = [c for c in metadata[position] if c is not None]
        for index in survivors:
            result.complete[index] = True
    return result
