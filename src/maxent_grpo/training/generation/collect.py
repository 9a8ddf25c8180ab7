"""Turn what a backend returns into complete completion groups: first call, retry rounds, trimming, drop decisions.

This is the per-process half of the trainer's generation step, in pure Python (no torch) so it can be tested on its
own. It asks the backend once for every prompt, then runs the seed helpers (`retry_incomplete_prompts`,
`truncate_to_expected_counts`, `drop_empty_prompt_groups`, `drop_incomplete_prompt_groups`) on each bucket of prompts
that expect the same count (a process holds at most three: the tail of a group that started on the previous process,
whole groups, and the head of a group that continues on the next one).

Rounds are collective (invariant I7): each retry round makes exactly one backend call, covering every bucket, and
whether a round happens at all is decided through ``any_process``: only when some process still has a short group
and, with a time budget, no process has spent it. A process with nothing left to ask still makes the call, with empty
lists, so that a backend whose generation is a collective (HF ``generate`` under ZeRO-3 / FSDP) runs the same number
of times on every process.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from maxent_grpo.training.generation.backends.protocol import Completion, GenerationBackend, GenerationStopped
from maxent_grpo.training.generation.helpers import (
    AggregatedGenerationState,
    append_completion_group,
    drop_empty_prompt_groups,
    drop_incomplete_prompt_groups,
    pending_generation_indices,
    retry_incomplete_prompts,
    seed_generation_groups,
    truncate_to_expected_counts,
)

logger = logging.getLogger(__name__)

#: Returns why a completion is unusable, or None when it is fine.
CompletionCheck = Callable[[Completion], str | None]

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

    def __init__(self, backend: GenerationBackend, check: CompletionCheck, result: CollectedGroups) -> None:
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


def _retry_round(caller: _BackendCaller, prompts: Sequence[Any], buckets: list[_Bucket]) -> None:
    """One retry round: a single backend call for the deficits of every bucket, merged by `retry_incomplete_prompts`.

    The call is made even when nothing is pending here (see the module docstring). Each bucket's share of the answer
    is handed to the seed helper through a one-round generator, so trimming, alignment and metadata merging stay the
    helper's.
    """
    requests = [(bucket, bucket.pending()) for bucket in buckets]
    asked = [(bucket, position) for bucket, pending in requests for position in pending]
    answers = caller(
        [prompts[bucket.indices[position]] for bucket, position in asked],
        [bucket.expected - len(bucket.state.completions[position]) for bucket, position in asked],
    )
    offset = 0
    for bucket, pending in requests:
        if not pending:
            continue
        share = answers[offset : offset + len(pending)]
        offset += len(pending)
        bucket.state = retry_incomplete_prompts(
            [prompts[i] for i in bucket.indices],
            lambda _prompts, _expected, _deficits, share=share: (
                [[c.text for c in group] for group in share],
                [list(group) for group in share],
            ),
            bucket.expected,
            bucket.state,
            1,
        )


def collect_completion_groups(
    backend: GenerationBackend,
    prompts: Sequence[Any],
    counts: Sequence[int],
    *,
    retry_limit: int,
    check: CompletionCheck,
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
    texts, seeded_meta = seed_generation_groups(len(prompts), None, [[] for _ in prompts])
    metadata: list[list[Any]] = seeded_meta if seeded_meta is not None else [[] for _ in prompts]
    for index, group in enumerate(caller(prompts, counts)):
        metadata = append_completion_group(texts, metadata, index, [c.text for c in group], list(group)) or metadata

    buckets = []
    for expected in sorted(set(counts)):
        indices = [i for i, count in enumerate(counts) if count == expected]
        state = AggregatedGenerationState([texts[i] for i in indices], [metadata[i] for i in indices])
        buckets.append(_Bucket(expected, indices, state))

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
        _retry_round(caller, prompts, buckets)
    result.stats["retried_prompts"] += len(retried)

    complete = [False] * len(prompts)
    for bucket in buckets:
        state, expected, indices = bucket.state, bucket.expected, bucket.indices
        bucket_texts, bucket_meta, _ = truncate_to_expected_counts(state.completions, state.metadata, expected)
        survivors, _, kept_texts, kept_meta = drop_empty_prompt_groups(
            list(indices), list(indices), bucket_texts, bucket_meta, result.stats
        )
        survivors, _, _, _, _ = drop_incomplete_prompt_groups(
            survivors, list(survivors), kept_texts, kept_meta, expected, result.stats
        )
        for position, index in enumerate(indices):
            texts[index], metadata[index] = bucket_texts[position], bucket_meta[position]
        for index in survivors:
            complete[index] = True

    result.groups = [[c for c in group if c is not None] for group in metadata]
    result.complete = complete
    return result
