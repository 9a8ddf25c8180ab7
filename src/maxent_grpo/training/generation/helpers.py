"""Turn whatever a generation backend returned into a complete, aligned batch.

The helpers work on plain Python lists, one group of completions per unique prompt, and never import torch. The
trainer chains them once per generation step::

    seed_generation_groups -> append_completion_group -> retry_incomplete_prompts
    -> truncate_to_expected_counts -> drop_empty_prompt_groups / drop_incomplete_prompt_groups
    -> flatten_prompt_completions

Guarantees shared by every helper:

* alignment: grouped metadata, when tracked, has one row per prompt and one entry per completion of that prompt
  (missing entries are ``None``); the prompt, answer and completion lists keep equal lengths;
* no borrowing: a completion only ever lands in the group of the prompt it was generated for;
* counters: drops and retries are added to the caller's ``generation_stats`` (``dropped_prompts``,
  ``retried_prompts``, ``retry_rounds``);
* no needless copies: functions that return new lists rebuild the outer lists and copy a group only when they
  change it; completion strings and metadata objects are always shared.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import chain, compress, repeat
from typing import TypeAlias

__all__ = [
    "AggregatedGenerationState",
    "GenerationBatch",
    "PromptCompletionBatch",
    "append_completion_group",
    "determine_retry_limit",
    "drop_empty_prompt_groups",
    "drop_incomplete_prompt_groups",
    "flatten_prompt_completions",
    "flatten_ref_metadata",
    "pending_generation_indices",
    "retry_incomplete_prompts",
    "seed_generation_groups",
    "truncate_to_expected_counts",
]

_DEFAULT_RETRY_LIMIT = 3
"""Retry rounds used when neither an explicit cap nor a positive ``expected_generations`` is given."""

GroupedCompletions: TypeAlias = list[list[str]]
GroupedMetadata: TypeAlias = list[list[object | None]]
GeneratorResult: TypeAlias = tuple[list[list[str] | None] | None, list[list[object | None] | None] | None]
PromptGenerator: TypeAlias = Callable[[list[str], int, list[int] | None], GeneratorResult | None]
"""``generator(prompts, expected_generations, deficits) -> (grouped_completions, grouped_metadata)``."""


@dataclass(slots=True)
class AggregatedGenerationState:
    """Mutable container for grouped completions and optional metadata.

    Attributes:
        completions: completions grouped per prompt index. Shape [N][G_i].
        metadata: metadata aligned to ``completions`` entry for entry, or None when not tracked. Shape [N][G_i].
    """

    completions: GroupedCompletions  # [N][G_i]
    metadata: GroupedMetadata | None = None  # [N][G_i] or None


@dataclass(frozen=True, slots=True)
class GenerationBatch:
    """Aggregated generation results, grouped per unique prompt.

    Construction checks that ``prompts``, ``answers``, ``grouped_completions`` and (when present)
    ``grouped_metadata`` have one entry per prompt, raising ``ValueError`` otherwise.

    Attributes:
        prompts: unique prompts. Shape [N].
        answers: reference answer of each prompt. Shape [N].
        grouped_completions: completions of each prompt. Shape [N][G_i].
        grouped_metadata: metadata aligned to ``grouped_completions``, or None when not tracked. Shape [N][G_i].
    """

    prompts: list[str]  # [N]
    answers: list[str]  # [N]
    grouped_completions: GroupedCompletions  # [N][G_i]
    grouped_metadata: GroupedMetadata | None = None  # [N][G_i] or None

    def __post_init__(self) -> None:
        _check_prompt_aligned(self.prompts, self.answers, self.grouped_completions, self.grouped_metadata)


@dataclass(frozen=True, slots=True)
class PromptCompletionBatch:
    """Flattened prompt/completion pairs: row k is one completion and the prompt it was generated for.

    Attributes:
        prompts: the prompt of each row, repeated once per completion of that prompt. Shape [M], M = sum(G_i).
        completions: one completion per row. Shape [M].
        metadata: flattened metadata of each row (``to_trl_payload()`` already applied), or None. Shape [M].
    """

    prompts: list[str]  # [M]
    completions: list[str]  # [M]
    metadata: list[object | None] | None = None  # [M] or None


def _check_same_length(name_a: str, len_a: int, name_b: str, len_b: int) -> None:
    if len_a != len_b:
        raise ValueError(f"{name_a} has {len_a} entries but {name_b} has {len_b}; they must be aligned per prompt")


def _check_prompt_aligned(
    prompts: list[str],
    answers: list[str],
    grouped_comps: GroupedCompletions,
    grouped_meta: GroupedMetadata | None,
) -> None:
    _check_same_length("prompts", len(prompts), "answers", len(answers))
    _check_same_length("prompts", len(prompts), "grouped completions", len(grouped_comps))
    if grouped_meta is not None:
        _check_same_length("grouped completions", len(grouped_comps), "grouped metadata", len(grouped_meta))


def _fit_meta_row(row: list[object | None] | None, size: int) -> list[object | None]:
    """Return a new metadata row of exactly ``size`` entries: excess trimmed, missing entries ``None``."""
    if not row:
        return [None] * size
    if len(row) >= size:
        return row[:size]
    return [*row, *([None] * (size - len(row)))]


def seed_generation_groups(
    prompt_count: int,
    grouped_comps: GroupedCompletions | None,
    grouped_meta: GroupedMetadata | None,
) -> tuple[GroupedCompletions, GroupedMetadata | None]:
    """Return initial completion/meta buffers aligned with prompts.

    Partially filled buffers are normalized into fresh lists of ``prompt_count`` groups: existing groups are copied
    (the caller's lists are never aliased), missing groups are empty, and each metadata row is trimmed or padded with
    ``None`` to the length of its completion group.

    Args:
        prompt_count: number of prompts that will be processed.
        grouped_comps: optional preexisting completions grouped per prompt.
        grouped_meta: optional preexisting metadata grouped per prompt.

    Returns:
        The completions buffer and the metadata buffer (None when ``grouped_meta`` is None), both of length
        ``prompt_count``.

    Raises:
        ValueError: if ``prompt_count`` is negative or a buffer holds more groups than there are prompts (which means
            it belongs to another batch).
    """
    if prompt_count < 0:
        raise ValueError(f"prompt_count must be >= 0, got {prompt_count}")
    comps_in = grouped_comps or []
    if len(comps_in) > prompt_count:
        _check_same_length("prompts", prompt_count, "grouped completions", len(comps_in))
    comps = [list(group) for group in comps_in]
    comps.extend([] for _ in range(prompt_count - len(comps)))
    if grouped_meta is None:
        return comps, None
    if len(grouped_meta) > prompt_count:
        _check_same_length("prompts", prompt_count, "grouped metadata", len(grouped_meta))
    meta = [_fit_meta_row(row, len(group)) for row, group in zip(grouped_meta, comps, strict=False)]
    meta.extend([None] * len(group) for group in comps[len(meta) :])
    return comps, meta


def append_completion_group(
    grouped_comps: GroupedCompletions,
    grouped_meta: GroupedMetadata | None,
    prompt_idx: int,
    completions: list[str] | None,
    meta_group: list[object | None] | None,
) -> GroupedMetadata | None:
    """Append completions (and metadata) for a specific prompt index.

    ``grouped_comps[prompt_idx]`` is extended in place. When ``meta_group`` is given and no metadata is tracked yet,
    a fresh metadata structure of ``None`` entries aligned to every existing group is created. ``meta_group`` is
    trimmed to ``len(completions)`` or padded with ``None``, so the prompt's metadata row stays aligned with its
    completions. No other prompt's group is touched.

    Args:
        grouped_comps: existing grouped completions buffer.
        grouped_meta: existing grouped metadata buffer, or None if metadata is not tracked.
        prompt_idx: index of the prompt whose completions are being appended.
        completions: new completions for that prompt; None or empty appends nothing.
        meta_group: metadata aligned to ``completions``.

    Returns:
        The updated grouped metadata (possibly newly created), or None when metadata is not tracked.

    Raises:
        IndexError: if ``prompt_idx`` is not in ``range(len(grouped_comps))`` (negative indices are rejected).
        ValueError: if ``grouped_meta`` does not have one row per prompt.
    """
    if not 0 <= prompt_idx < len(grouped_comps):
        raise IndexError(f"prompt_idx {prompt_idx} out of range for {len(grouped_comps)} prompt groups")
    if grouped_meta is not None and len(grouped_meta) != len(grouped_comps):
        _check_same_length("grouped completions", len(grouped_comps), "grouped metadata", len(grouped_meta))
    if not completions:
        return grouped_meta
    group = grouped_comps[prompt_idx]
    if grouped_meta is None:
        if meta_group is None:
            group.extend(completions)
            return None
        grouped_meta = [[None] * len(existing) for existing in grouped_comps]
    meta_row = grouped_meta[prompt_idx]
    if len(meta_row) != len(group):
        grouped_meta[prompt_idx] = meta_row = _fit_meta_row(meta_row, len(group))
    group.extend(completions)
    count = len(completions)
    if meta_group is None:
        meta_row.extend([None] * count)
    elif len(meta_group) == count:
        meta_row.extend(meta_group)
    elif len(meta_group) > count:
        meta_row.extend(meta_group[:count])
    else:
        meta_row.extend(meta_group)
        meta_row.extend([None] * (count - len(meta_group)))
    return grouped_meta


def determine_retry_limit(expected_generations: int, max_retry_rounds: int | None) -> int:
    """Return the number of retry rounds allowed for a batch.

    Args:
        expected_generations: desired completions per prompt, the fallback budget when no explicit cap is set.
        max_retry_rounds: explicit retry cap; used when > 0.

    Returns:
        ``max_retry_rounds`` when it is > 0, else ``expected_generations`` when it is > 0, else
        ``_DEFAULT_RETRY_LIMIT``. Always >= 1.
    """
    if max_retry_rounds is not None and max_retry_rounds > 0:
        return max_retry_rounds
    if expected_generations > 0:
        return expected_generations
    return _DEFAULT_RETRY_LIMIT


def pending_generation_indices(aggregated_comps: GroupedCompletions, expected_generations: int) -> list[int]:
    """Return, in increasing order, the prompt indices whose completion count is below ``expected_generations``."""
    return [idx for idx, group in enumerate(aggregated_comps) if len(group) < expected_generations]


def retry_incomplete_prompts(
    prompts: list[str],
    generator: PromptGenerator,
    expected_generations: int,
    aggregated: AggregatedGenerationState,
    max_retry_rounds: int | None,
    *,
    generation_stats: dict[str, int] | None = None,
) -> AggregatedGenerationState:
    """Retry prompts missing completions until every group is full or the retry limit is hit.

    Each round calls ``generator(pending_prompts, expected_generations, deficits)`` once, where ``pending_prompts``
    are the prompts still short of ``expected_generations`` (in prompt order) and ``deficits[i]`` is how many
    completions ``pending_prompts[i]`` still needs. At most ``determine_retry_limit(expected_generations,
    max_retry_rounds)`` rounds run. What comes back is handled per pending prompt:

    * group i goes to the prompt that was asked at position i, never to another one;
    * a group longer than its deficit is trimmed to the deficit;
    * a missing group (the generator returned None, a None group, or fewer groups than prompts) adds nothing;
    * metadata is merged through :func:`append_completion_group` (padded with ``None`` where absent or short).

    Exceptions raised by ``generator`` propagate unchanged (the counters still include the failed call and the
    completions gathered so far stay in ``aggregated``): a caller that wants a failing backend call to count as an
    empty round wraps its backend accordingly.

    Args:
        prompts: original prompts, one per group of ``aggregated.completions``.
        generator: callable performing generation for a batch of prompts.
        expected_generations: completions requested per prompt; values <= 0 mean nothing is pending.
        aggregated: completions and metadata, updated in place.
        max_retry_rounds: explicit retry cap; defaults derive from ``expected_generations`` when None or <= 0.
        generation_stats: optional counters; ``retry_rounds`` grows by the number of generator calls made and
            ``retried_prompts`` by the number of distinct prompts retried at least once.

    Returns:
        ``aggregated`` after the retries.

    Raises:
        ValueError: if ``prompts`` and ``aggregated`` are not aligned, or the generator returns more groups than it
            was given prompts (alignment would be ambiguous).
    """
    comps = aggregated.completions
    _check_same_length("prompts", len(prompts), "grouped completions", len(comps))
    if aggregated.metadata is not None:
        _check_same_length("grouped completions", len(comps), "grouped metadata", len(aggregated.metadata))
    limit = determine_retry_limit(expected_generations, max_retry_rounds)
    rounds = 0
    retried: set[int] = set()
    # Groups only grow, so after the first scan only the previously pending prompts can still be pending.
    pending = pending_generation_indices(comps, expected_generations)
    try:
        while pending and rounds < limit:
            rounds += 1
            retried.update(pending)
            deficits = [expected_generations - len(comps[idx]) for idx in pending]
            result = generator([prompts[idx] for idx in pending], expected_generations, deficits)
            groups, meta_groups = result if result is not None else (None, None)
            if not groups:
                continue
            if len(groups) > len(pending):
                raise ValueError(f"generator returned {len(groups)} groups for {len(pending)} prompts")
            metas = chain(meta_groups or (), repeat(None))
            for idx, group, meta_group in zip(pending, groups, metas, strict=False):
                if not group:
                    continue
                deficit = expected_generations - len(comps[idx])
                if len(group) > deficit:
                    group = group[:deficit]
                aggregated.metadata = append_completion_group(comps, aggregated.metadata, idx, group, meta_group)
            pending = [idx for idx in pending if len(comps[idx]) < expected_generations]
    finally:
        if generation_stats is not None:
            generation_stats["retry_rounds"] = generation_stats.get("retry_rounds", 0) + rounds
            generation_stats["retried_prompts"] = generation_stats.get("retried_prompts", 0) + len(retried)
    return aggregated


def truncate_to_expected_counts(
    aggregated_comps: GroupedCompletions,
    aggregated_meta: GroupedMetadata | None,
    expected_generations: int,
) -> tuple[GroupedCompletions, GroupedMetadata | None, int]:
    """Trim completions/meta to the requested count and count the prompts left short.

    Returns new outer lists and never modifies the inputs: a group longer than ``expected_generations`` is replaced
    by a copy of its first ``expected_generations`` completions, and a metadata row whose length differs from its
    group's by a copy trimmed or padded with ``None``. Groups and rows that need no change are shared, not copied.

    Args:
        aggregated_comps: grouped completions per prompt.
        aggregated_meta: optional grouped metadata per prompt.
        expected_generations: desired completions per prompt; values <= 0 skip trimming.

    Returns:
        Grouped completions, grouped metadata (None when not tracked), and the number of non-empty prompts whose
        completion count still differs from ``expected_generations`` after trimming (i.e. short ones; 0 when
        ``expected_generations`` <= 0).

    Raises:
        ValueError: if ``aggregated_meta`` does not have one row per prompt.
    """
    if aggregated_meta is not None:
        _check_same_length("grouped completions", len(aggregated_comps), "grouped metadata", len(aggregated_meta))
    if expected_generations > 0:
        comps = [
            group if len(group) <= expected_generations else group[:expected_generations] for group in aggregated_comps
        ]
        partial = sum(1 for group in comps if 0 < len(group) < expected_generations)
    else:
        comps = list(aggregated_comps)
        partial = 0
    if aggregated_meta is None:
        return comps, None, partial
    meta = [
        row if len(row) == len(group) else _fit_meta_row(row, len(group))
        for row, group in zip(aggregated_meta, comps, strict=True)
    ]
    return comps, meta, partial


def _filter_prompt_groups(
    keep: list[bool],
    prompts: list[str],
    answers: list[str],
    aggregated_comps: GroupedCompletions,
    aggregated_meta: GroupedMetadata | None,
    generation_stats: dict[str, int],
) -> tuple[list[str], list[str], GroupedCompletions, GroupedMetadata | None, int]:
    dropped = len(keep) - sum(keep)
    generation_stats["dropped_prompts"] = generation_stats.get("dropped_prompts", 0) + dropped
    meta = None if aggregated_meta is None else list(compress(aggregated_meta, keep))
    return (
        list(compress(prompts, keep)),
        list(compress(answers, keep)),
        list(compress(aggregated_comps, keep)),
        meta,
        dropped,
    )


def drop_empty_prompt_groups(
    prompts: list[str],
    answers: list[str],
    aggregated_comps: GroupedCompletions,
    aggregated_meta: GroupedMetadata | None,
    generation_stats: dict[str, int],
) -> tuple[list[str], list[str], GroupedCompletions, GroupedMetadata | None]:
    """Remove prompts that never yielded completions.

    Returns new outer lists holding only the prompts with at least one completion, in their original order; the
    groups themselves are shared with the inputs, not copied. ``generation_stats["dropped_prompts"]`` grows by the
    number of prompts removed.

    Args:
        prompts: prompts aligned to answers and grouped completions.
        answers: reference answers aligned to prompts.
        aggregated_comps: grouped completions per prompt.
        aggregated_meta: optional grouped metadata per prompt.
        generation_stats: mutable counters.

    Returns:
        Filtered prompts, answers, completions and metadata (None when not tracked), aligned to the kept prompts.

    Raises:
        ValueError: if the inputs do not have one entry per prompt.
    """
    _check_prompt_aligned(prompts, answers, aggregated_comps, aggregated_meta)
    keep = [bool(group) for group in aggregated_comps]
    kept_prompts, kept_answers, kept_comps, kept_meta, _ = _filter_prompt_groups(
        keep, prompts, answers, aggregated_comps, aggregated_meta, generation_stats
    )
    return kept_prompts, kept_answers, kept_comps, kept_meta


def drop_incomplete_prompt_groups(
    prompts: list[str],
    answers: list[str],
    aggregated_comps: GroupedCompletions,
    aggregated_meta: GroupedMetadata | None,
    expected_generations: int,
    generation_stats: dict[str, int],
) -> tuple[list[str], list[str], GroupedCompletions, GroupedMetadata | None, int]:
    """Drop prompt groups that do not hold exactly ``expected_generations`` completions.

    TRL assumes a fixed number of completions per prompt, so any group whose size differs from
    ``expected_generations`` (short or empty) is removed from the aligned lists. ``expected_generations`` <= 0 means
    no fixed count was requested and nothing is dropped. Returns new outer lists in the original order; groups are
    shared, not copied. ``generation_stats["dropped_prompts"]`` grows by the number of prompts removed.

    Args:
        prompts: prompts aligned to answers and grouped completions.
        answers: reference answers aligned to prompts.
        aggregated_comps: grouped completions per prompt.
        aggregated_meta: optional grouped metadata per prompt.
        expected_generations: required completions per prompt.
        generation_stats: mutable counters.

    Returns:
        Filtered prompts, answers, completions, metadata (None when not tracked), and the number of prompts dropped.

    Raises:
        ValueError: if the inputs do not have one entry per prompt.
    """
    _check_prompt_aligned(prompts, answers, aggregated_comps, aggregated_meta)
    if expected_generations > 0:
        keep = [len(group) == expected_generations for group in aggregated_comps]
    else:
        keep = [True] * len(aggregated_comps)
    return _filter_prompt_groups(keep, prompts, answers, aggregated_comps, aggregated_meta, generation_stats)


def flatten_ref_metadata(
    grouped_comps: GroupedCompletions,
    grouped_meta: GroupedMetadata | None,
) -> list[object | None] | None:
    """Flatten metadata to align with ``chain(*grouped_comps)``.

    Entries exposing ``to_trl_payload`` are replaced by the result of calling it; other entries are kept as they
    are. A metadata row shorter than its group is filled with ``None``; entries beyond the group's length are ignored.

    Args:
        grouped_comps: grouped completions per prompt.
        grouped_meta: grouped metadata aligned to ``grouped_comps``.

    Returns:
        One entry per flattened completion, or None when ``grouped_meta`` is None.

    Raises:
        ValueError: if ``grouped_meta`` does not have one row per prompt.
    """
    if grouped_meta is None:
        return None
    _check_same_length("grouped completions", len(grouped_comps), "grouped metadata", len(grouped_meta))
    rows = [
        row if len(row) == len(group) else _fit_meta_row(row, len(group))
        for group, row in zip(grouped_comps, grouped_meta, strict=True)
    ]
    return [
        entry if (convert := getattr(entry, "to_trl_payload", None)) is None else convert()
        for entry in chain.from_iterable(rows)
    ]


def flatten_prompt_completions(gen_batch: GenerationBatch) -> tuple[PromptCompletionBatch, list[str]]:
    """Return flattened prompt/completion pairs and aligned answers.

    Row k of the result is the k-th completion of ``chain(*gen_batch.grouped_completions)``, paired with the prompt
    and answer of the group it came from and with its flattened metadata (see :func:`flatten_ref_metadata`).

    Args:
        gen_batch: aggregated generation results.

    Returns:
        The flattened batch and the answers, one per row.

    Raises:
        ValueError: if the batch's lists were modified after construction and no longer have one entry per prompt.
    """
    groups = gen_batch.grouped_completions
    _check_prompt_aligned(gen_batch.prompts, gen_batch.answers, groups, gen_batch.grouped_metadata)
    sizes = [len(group) for group in groups]
    prompts = list(chain.from_iterable(map(repeat, gen_batch.prompts, sizes)))
    answers = list(chain.from_iterable(map(repeat, gen_batch.answers, sizes)))
    batch = PromptCompletionBatch(
        prompts=prompts,
        completions=list(chain.from_iterable(groups)),
        metadata=flatten_ref_metadata(groups, gen_batch.grouped_metadata),
    )
    return batch, answers
