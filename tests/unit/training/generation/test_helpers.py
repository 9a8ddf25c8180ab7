"""Unit and property tests for the retry / aggregate / drop helpers of ``maxent_grpo.training.generation.helpers``."""

from __future__ import annotations

import dataclasses
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from maxent_grpo.training.generation import helpers
from maxent_grpo.training.generation.helpers import (
    AggregatedGenerationState,
    GenerationBatch,
    PromptCompletionBatch,
    append_completion_group,
    determine_retry_limit,
    drop_empty_prompt_groups,
    drop_incomplete_prompt_groups,
    flatten_prompt_completions,
    flatten_ref_metadata,
    pending_generation_indices,
    retry_incomplete_prompts,
    seed_generation_groups,
    truncate_to_expected_counts,
)

PROPERTY_SETTINGS = settings(max_examples=100, deadline=None)


@dataclasses.dataclass(frozen=True)
class Payload:
    """Metadata that converts itself for TRL, tagged with the prompt it belongs to."""

    prompt: str
    slot: int

    def to_trl_payload(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "slot": self.slot}


def completion_for(prompt: str, slot: int) -> str:
    """A completion that names its prompt, so tests can check it never lands in another prompt's group."""
    return f"{prompt}#{slot}"


def owner(completion: str) -> str:
    return completion.rsplit("#", 1)[0]


class RecordingGenerator:
    """Generator stand-in that records every call and returns random, possibly short or empty, groups.

    Each call is checked against the live state: every requested count must equal the prompt's current deficit.
    """

    def __init__(
        self, rng: random.Random, state: AggregatedGenerationState, prompts: list[str], expected: int
    ) -> None:
        self.rng = rng
        self.state = state
        self.index_of = {prompt: idx for idx, prompt in enumerate(prompts)}
        self.expected = expected
        self.calls: list[tuple[list[str], list[int]]] = []
        self.slot = 0

    def __call__(
        self, prompts: list[str], expected_generations: int, deficits: list[int] | None
    ) -> tuple[list[list[str] | None] | None, list[list[object | None] | None] | None] | None:
        assert deficits is not None
        assert expected_generations == self.expected
        self.calls.append((list(prompts), list(deficits)))
        for prompt, deficit in zip(prompts, deficits, strict=True):
            current = len(self.state.completions[self.index_of[prompt]])
            assert deficit == self.expected - current > 0
        mode = self.rng.random()
        if mode < 0.1:
            return None
        returned = prompts[: self.rng.randint(0, len(prompts))] if mode < 0.3 else prompts
        groups: list[list[str] | None] = []
        metas: list[list[object | None] | None] = []
        for prompt, deficit in zip(returned, deficits, strict=False):
            if self.rng.random() < 0.15:
                groups.append(None)
                metas.append(None)
                continue
            count = self.rng.randint(0, deficit + 1)  # deficit + 1 checks that extra completions are trimmed
            slots = range(self.slot, self.slot + count)
            self.slot += count
            groups.append([completion_for(prompt, slot) for slot in slots])
            metas.append([Payload(prompt, slot) for slot in slots][: self.rng.randint(0, count)])
        meta_choice = self.rng.random()
        if meta_choice < 0.2:
            return groups, None
        if meta_choice < 0.4:
            return groups, metas[: self.rng.randint(0, len(metas))]
        return groups, metas


def assert_prompt_aligned(
    prompts: list[str], answers: list[str], comps: list[list[str]], meta: list[list[object | None]] | None
) -> None:
    assert len(prompts) == len(answers) == len(comps)
    for prompt, answer, group in zip(prompts, answers, comps, strict=True):
        assert answer == f"answer of {prompt}"
        assert all(owner(completion) == prompt for completion in group)
    if meta is not None:
        assert len(meta) == len(comps)
        for prompt, group, row in zip(prompts, comps, meta, strict=True):
            assert len(row) == len(group)
            assert all(entry is None or entry.prompt == prompt for entry in row)


# --- seed_generation_groups -------------------------------------------------------------------------------------


def test_seed_without_buffers_gives_empty_groups_and_no_metadata() -> None:
    comps, meta = seed_generation_groups(3, None, None)
    assert comps == [[], [], []]
    assert meta is None
    comps[0].append("x")
    assert comps[1] == []


def test_seed_copies_partial_buffers_and_aligns_metadata() -> None:
    existing = [["a0", "a1"], ["b0"]]
    existing_meta: list[list[object | None]] = [["m0", "m1", "extra"]]
    comps, meta = seed_generation_groups(3, existing, existing_meta)
    assert comps == [["a0", "a1"], ["b0"], []]
    assert meta == [["m0", "m1"], [None], []]
    comps[0].append("a2")
    assert existing[0] == ["a0", "a1"]
    assert existing_meta == [["m0", "m1", "extra"]]


@pytest.mark.parametrize("which", ["completions", "metadata"])
def test_seed_rejects_buffers_longer_than_the_batch(which: str) -> None:
    comps: list[list[str]] = [[], [], []] if which == "completions" else []
    meta: list[list[object | None]] | None = [[], [], []] if which == "metadata" else None
    with pytest.raises(ValueError, match=r"\b2\b.*\b3\b"):
        seed_generation_groups(2, comps, meta)


def test_seed_rejects_negative_prompt_count() -> None:
    with pytest.raises(ValueError, match="prompt_count"):
        seed_generation_groups(-1, None, None)


# --- append_completion_group ------------------------------------------------------------------------------------


def test_append_extends_in_place_without_metadata() -> None:
    comps: list[list[str]] = [["a0"], []]
    assert append_completion_group(comps, None, 1, ["b0", "b1"], None) is None
    assert comps == [["a0"], ["b0", "b1"]]


def test_append_creates_metadata_aligned_to_every_group() -> None:
    comps: list[list[str]] = [["a0"], ["b0", "b1"]]
    meta = append_completion_group(comps, None, 0, ["a1"], ["ma1"])
    assert comps == [["a0", "a1"], ["b0", "b1"]]
    assert meta == [[None, "ma1"], [None, None]]


def test_append_pads_short_and_trims_long_metadata() -> None:
    comps: list[list[str]] = [[], []]
    meta: list[list[object | None]] | None = [[], []]
    meta = append_completion_group(comps, meta, 0, ["a0", "a1", "a2"], ["m0"])
    meta = append_completion_group(comps, meta, 1, ["b0"], ["n0", "n1", "n2"])
    meta = append_completion_group(comps, meta, 1, ["b1"], None)
    assert meta == [["m0", None, None], ["n0", None]]


def test_append_realigns_a_misaligned_metadata_row() -> None:
    comps: list[list[str]] = [["a0", "a1"]]
    meta: list[list[object | None]] | None = [["m0", "m1", "stale"]]
    meta = append_completion_group(comps, meta, 0, ["a2"], ["m2"])
    assert meta == [["m0", "m1", "m2"]]


@pytest.mark.parametrize("completions", [None, []])
def test_append_of_nothing_changes_nothing(completions: list[str] | None) -> None:
    comps: list[list[str]] = [["a0"]]
    assert append_completion_group(comps, None, 0, completions, ["m"]) is None
    assert comps == [["a0"]]


@pytest.mark.parametrize("prompt_idx", [2, -1])
def test_append_rejects_out_of_range_prompt_index(prompt_idx: int) -> None:
    with pytest.raises(IndexError, match="out of range"):
        append_completion_group([[], []], None, prompt_idx, ["x"], None)


def test_append_rejects_metadata_with_wrong_row_count() -> None:
    with pytest.raises(ValueError, match=r"\b2\b.*\b1\b"):
        append_completion_group([[], []], [[]], 0, ["x"], None)


# --- determine_retry_limit / pending_generation_indices ---------------------------------------------------------


@pytest.mark.parametrize(
    ("expected", "max_rounds", "limit"),
    [(8, 2, 2), (8, None, 8), (8, 0, 8), (8, -1, 8), (0, None, 3), (-2, 0, 3), (0, 5, 5)],
)
def test_determine_retry_limit(expected: int, max_rounds: int | None, limit: int) -> None:
    assert determine_retry_limit(expected, max_rounds) == limit


def test_default_retry_limit_is_three() -> None:
    assert helpers._DEFAULT_RETRY_LIMIT == 3


def test_pending_indices_are_the_short_groups_in_order() -> None:
    assert pending_generation_indices([["a", "b"], [], ["c"], ["d", "e", "f"]], 2) == [1, 2]
    assert pending_generation_indices([[], ["a"]], 0) == []


# --- retry_incomplete_prompts -----------------------------------------------------------------------------------


def test_retry_asks_for_the_deficits_and_fills_the_right_prompts() -> None:
    prompts = ["p0", "p1", "p2"]
    state = AggregatedGenerationState([["p0#0", "p0#1"], [], ["p2#0"]])
    calls: list[tuple[list[str], int, list[int] | None]] = []

    def generator(
        batch: list[str], expected: int, deficits: list[int] | None
    ) -> tuple[list[list[str]], list[list[object | None]] | None]:
        calls.append((batch, expected, deficits))
        assert deficits is not None
        return [[completion_for(p, 10 + k) for k in range(d)] for p, d in zip(batch, deficits, strict=True)], None

    stats: dict[str, int] = {}
    result = retry_incomplete_prompts(prompts, generator, 2, state, None, generation_stats=stats)
    assert result is state
    assert calls == [(["p1", "p2"], 2, [2, 1])]
    assert state.completions == [["p0#0", "p0#1"], ["p1#10", "p1#11"], ["p2#0", "p2#10"]]
    assert state.metadata is None
    assert stats == {"retry_rounds": 1, "retried_prompts": 2}


def test_retry_stops_at_the_limit_and_counts_distinct_prompts() -> None:
    calls: list[list[str]] = []

    def generator(batch: list[str], expected: int, deficits: list[int] | None) -> None:
        calls.append(batch)

    stats = {"retry_rounds": 1, "retried_prompts": 1}
    state = AggregatedGenerationState([[], ["b"], []])
    retry_incomplete_prompts(["a", "b", "c"], generator, 1, state, 4, generation_stats=stats)
    assert calls == [["a", "c"]] * 4
    assert stats == {"retry_rounds": 5, "retried_prompts": 3}


def test_retry_without_pending_prompts_never_calls_the_generator() -> None:
    def generator(batch: list[str], expected: int, deficits: list[int] | None) -> None:
        raise AssertionError("must not be called")

    stats: dict[str, int] = {}
    state = AggregatedGenerationState([["a#0"]])
    retry_incomplete_prompts(["a"], generator, 1, state, None, generation_stats=stats)
    assert stats == {"retry_rounds": 0, "retried_prompts": 0}


def test_retry_merges_metadata_and_pads_missing_entries() -> None:
    state = AggregatedGenerationState([["a#0"], []], [["ma0"], []])

    def generator(
        batch: list[str], expected: int, deficits: list[int] | None
    ) -> tuple[list[list[str]], list[list[object | None]]]:
        # b gets one completion more than it asked for, and no metadata
        return [["a#1"], ["b#0", "b#1", "b#2"]], [["ma1"]]

    retry_incomplete_prompts(["a", "b"], generator, 2, state, 2)
    assert state.completions == [["a#0", "a#1"], ["b#0", "b#1"]]
    assert state.metadata == [["ma0", "ma1"], [None, None]]


def test_retry_creates_metadata_when_the_generator_starts_returning_it() -> None:
    state = AggregatedGenerationState([["a#0"], ["b#0"]])

    def generator(
        batch: list[str], expected: int, deficits: list[int] | None
    ) -> tuple[list[list[str]], list[list[object | None]]]:
        return [[f"{p}#1"] for p in batch], [[f"m-{p}"] for p in batch]

    retry_incomplete_prompts(["a", "b"], generator, 2, state, 1)
    assert state.metadata == [[None, "m-a"], [None, "m-b"]]


def test_retry_short_reply_leaves_the_other_prompts_pending() -> None:
    calls: list[list[str]] = []

    def generator(batch: list[str], expected: int, deficits: list[int] | None) -> tuple[list[list[str] | None], None]:
        calls.append(batch)
        return [[f"{batch[0]}#x"], None][: len(batch) - 1 or 1], None

    state = AggregatedGenerationState([[], [], []])
    retry_incomplete_prompts(["a", "b", "c"], generator, 1, state, 3)
    assert calls == [["a", "b", "c"], ["b", "c"], ["c"]]
    assert state.completions == [["a#x"], ["b#x"], ["c#x"]]


def test_retry_lets_generator_errors_propagate() -> None:
    def generator(batch: list[str], expected: int, deficits: list[int] | None) -> None:
        raise RuntimeError("backend down")

    stats: dict[str, int] = {}
    with pytest.raises(RuntimeError, match="backend down"):
        retry_incomplete_prompts(["a"], generator, 1, AggregatedGenerationState([[]]), 2, generation_stats=stats)
    assert stats == {"retry_rounds": 1, "retried_prompts": 1}


def test_retry_trims_to_the_deficit_even_if_the_generator_mutates_its_arguments() -> None:
    def generator(batch: list[str], expected: int, deficits: list[int] | None) -> tuple[list[list[str]], None]:
        assert deficits == [1]
        deficits[0] = 5
        return [["a#1", "a#2", "a#3"]], None

    state = AggregatedGenerationState([["a#0"]])
    retry_incomplete_prompts(["a"], generator, 2, state, 1)
    assert state.completions == [["a#0", "a#1"]]


def test_retry_rejects_more_groups_than_prompts() -> None:
    def generator(batch: list[str], expected: int, deficits: list[int] | None) -> tuple[list[list[str]], None]:
        return [["x"], ["y"]], None

    with pytest.raises(ValueError, match="2 groups for 1 prompts"):
        retry_incomplete_prompts(["a", "b"], generator, 1, AggregatedGenerationState([[], ["b#0"]]), 1)


def test_retry_rejects_misaligned_prompts() -> None:
    with pytest.raises(ValueError, match=r"\b2\b.*\b1\b"):
        retry_incomplete_prompts(["a", "b"], lambda *_: None, 1, AggregatedGenerationState([[]]), 1)


# --- truncate_to_expected_counts --------------------------------------------------------------------------------


def test_truncate_trims_and_counts_short_non_empty_prompts() -> None:
    comps = [["a0", "a1", "a2"], ["b0"], [], ["d0", "d1"]]
    meta: list[list[object | None]] = [["m0", "m1", "m2"], [], [], ["n0", "n1", "n2"]]
    new_comps, new_meta, partial = truncate_to_expected_counts(comps, meta, 2)
    assert new_comps == [["a0", "a1"], ["b0"], [], ["d0", "d1"]]
    assert new_meta == [["m0", "m1"], [None], [], ["n0", "n1"]]
    assert partial == 1
    assert comps[0] == ["a0", "a1", "a2"]
    assert meta[3] == ["n0", "n1", "n2"]


@pytest.mark.parametrize("expected", [0, -1])
def test_truncate_with_non_positive_expected_keeps_everything(expected: int) -> None:
    comps = [["a0", "a1", "a2"], ["b0"]]
    new_comps, new_meta, partial = truncate_to_expected_counts(comps, None, expected)
    assert new_comps == comps
    assert new_comps is not comps
    assert new_meta is None
    assert partial == 0


# --- drop_empty_prompt_groups / drop_incomplete_prompt_groups ---------------------------------------------------


def test_drop_empty_removes_prompts_without_completions() -> None:
    stats = {"dropped_prompts": 2}
    prompts, answers = ["a", "b", "c"], ["A", "B", "C"]
    result = drop_empty_prompt_groups(prompts, answers, [["a#0"], [], ["c#0"]], [["ma"], [], [None]], stats)
    assert result == (["a", "c"], ["A", "C"], [["a#0"], ["c#0"]], [["ma"], [None]])
    assert stats == {"dropped_prompts": 3}
    assert prompts == ["a", "b", "c"]


def test_drop_empty_without_metadata_or_drops() -> None:
    stats: dict[str, int] = {}
    assert drop_empty_prompt_groups(["a"], ["A"], [["a#0"]], None, stats) == (["a"], ["A"], [["a#0"]], None)
    assert stats == {"dropped_prompts": 0}


def test_drop_incomplete_removes_groups_of_the_wrong_size_and_returns_the_count() -> None:
    stats: dict[str, int] = {}
    comps = [["a#0", "a#1"], ["b#0"], [], ["d#0", "d#1", "d#2"]]
    result = drop_incomplete_prompt_groups(["a", "b", "c", "d"], ["A", "B", "C", "D"], comps, None, 2, stats)
    assert result == (["a"], ["A"], [["a#0", "a#1"]], None, 3)
    assert stats == {"dropped_prompts": 3}


def test_drop_incomplete_without_expected_count_drops_nothing() -> None:
    stats: dict[str, int] = {}
    result = drop_incomplete_prompt_groups(["a", "b"], ["A", "B"], [["a#0"], []], [["m"], []], 0, stats)
    assert result == (["a", "b"], ["A", "B"], [["a#0"], []], [["m"], []], 0)
    assert stats == {"dropped_prompts": 0}


@pytest.mark.parametrize("drop", ["empty", "incomplete"])
@pytest.mark.parametrize(
    ("prompts", "answers", "comps", "meta", "lengths"),
    [
        (["a", "b"], ["A"], [[], []], None, ("2", "1")),
        (["a", "b"], ["A", "B"], [[]], None, ("2", "1")),
        (["a"], ["A"], [[]], [[], []], ("1", "2")),
    ],
)
def test_drops_reject_misaligned_inputs_naming_both_lengths(
    drop: str,
    prompts: list[str],
    answers: list[str],
    comps: list[list[str]],
    meta: list[list[object | None]] | None,
    lengths: tuple[str, str],
) -> None:
    pattern = rf"\b{lengths[0]}\b.*\b{lengths[1]}\b"
    with pytest.raises(ValueError, match=pattern):
        if drop == "empty":
            drop_empty_prompt_groups(prompts, answers, comps, meta, {})
        else:
            drop_incomplete_prompt_groups(prompts, answers, comps, meta, 1, {})


# --- flatten_ref_metadata / flatten_prompt_completions ----------------------------------------------------------


def test_flatten_ref_metadata_converts_payloads_and_pads() -> None:
    comps = [["a#0", "a#1"], ["b#0"], ["c#0"]]
    meta: list[list[object | None]] = [[Payload("a", 0)], [{"raw": 1}, "beyond the group"], [None]]
    assert flatten_ref_metadata(comps, meta) == [{"prompt": "a", "slot": 0}, None, {"raw": 1}, None]


def test_flatten_ref_metadata_without_metadata_is_none() -> None:
    assert flatten_ref_metadata([["a#0"]], None) is None


def test_flatten_ref_metadata_rejects_wrong_row_count() -> None:
    with pytest.raises(ValueError, match=r"\b1\b.*\b0\b"):
        flatten_ref_metadata([["a#0"]], [])


def test_flatten_prompt_completions_repeats_prompts_and_answers() -> None:
    gen_batch = GenerationBatch(
        prompts=["a", "b", "c"],
        answers=["A", "B", "C"],
        grouped_completions=[["a#0", "a#1"], [], ["c#0"]],
        grouped_metadata=[[Payload("a", 0), None], [], [Payload("c", 0)]],
    )
    flat, answers = flatten_prompt_completions(gen_batch)
    assert flat == PromptCompletionBatch(
        prompts=["a", "a", "c"],
        completions=["a#0", "a#1", "c#0"],
        metadata=[{"prompt": "a", "slot": 0}, None, {"prompt": "c", "slot": 0}],
    )
    assert answers == ["A", "A", "C"]


def test_flatten_prompt_completions_without_metadata() -> None:
    flat, answers = flatten_prompt_completions(GenerationBatch(["a"], ["A"], [["a#0", "a#1"]]))
    assert flat == PromptCompletionBatch(["a", "a"], ["a#0", "a#1"], None)
    assert answers == ["A", "A"]


def test_flatten_prompt_completions_rechecks_lists_changed_after_construction() -> None:
    gen_batch = GenerationBatch(["a"], ["A"], [["a#0"]])
    gen_batch.answers.append("B")
    with pytest.raises(ValueError, match=r"\b1\b.*\b2\b"):
        flatten_prompt_completions(gen_batch)


@pytest.mark.parametrize(
    ("prompts", "answers", "comps", "meta", "lengths"),
    [
        (["a"], ["A", "B"], [[]], None, ("1", "2")),
        (["a", "b"], ["A", "B"], [[]], None, ("2", "1")),
        (["a"], ["A"], [[]], [], ("1", "0")),
    ],
)
def test_generation_batch_rejects_misaligned_fields(
    prompts: list[str],
    answers: list[str],
    comps: list[list[str]],
    meta: list[list[object | None]] | None,
    lengths: tuple[str, str],
) -> None:
    with pytest.raises(ValueError, match=rf"\b{lengths[0]}\b.*\b{lengths[1]}\b"):
        GenerationBatch(prompts, answers, comps, meta)


def test_batch_types_are_frozen_and_slotted() -> None:
    gen_batch = GenerationBatch(["a"], ["A"], [["a#0"]])
    flat = PromptCompletionBatch(["a"], ["a#0"])
    for value in (gen_batch, flat):
        assert not hasattr(value, "__dict__")
        with pytest.raises(dataclasses.FrozenInstanceError):
            value.prompts = []  # type: ignore[misc]


def test_public_names() -> None:
    assert set(helpers.__all__) == {
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
    }


def test_helpers_do_not_import_torch() -> None:
    """Load helpers.py on its own (the package root imports the trainer, hence torch) and check torch stays out."""
    path = Path(helpers.__file__)
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('standalone_helpers', {str(path)!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "sys.modules['standalone_helpers'] = module\n"
        "spec.loader.exec_module(module)\n"
        "assert 'torch' not in sys.modules, 'helpers imported torch'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- properties ---------------------------------------------------------------------------------------------------


@st.composite
def initial_batches(draw: st.DrawFn) -> tuple[list[str], int, list[list[str]], list[list[object | None]] | None]:
    """Unique prompts, an expected count, and first-pass groups (possibly short, empty or too long)."""
    count = draw(st.integers(min_value=0, max_value=10))
    expected = draw(st.integers(min_value=1, max_value=5))
    prompts = [f"prompt {idx}" for idx in range(count)]
    sizes = draw(st.lists(st.integers(min_value=0, max_value=expected + 2), min_size=count, max_size=count))
    comps = [[completion_for(p, slot) for slot in range(size)] for p, size in zip(prompts, sizes, strict=True)]
    meta: list[list[object | None]] | None = None
    if draw(st.booleans()):
        meta = [
            [Payload(p, slot) for slot in range(draw(st.integers(min_value=0, max_value=size)))]
            for p, size in zip(prompts, sizes, strict=True)
        ]
    return prompts, expected, comps, meta


@PROPERTY_SETTINGS
@given(
    batch=initial_batches(),
    max_retry_rounds=st.one_of(st.none(), st.integers(min_value=-1, max_value=4)),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_helper_chain_keeps_alignment_and_respects_retry_budget(
    batch: tuple[list[str], int, list[list[str]], list[list[object | None]] | None],
    max_retry_rounds: int | None,
    seed: int,
) -> None:
    prompts, expected, first_pass, first_meta = batch
    answers = [f"answer of {p}" for p in prompts]
    stats: dict[str, int] = {}

    comps, meta = seed_generation_groups(len(prompts), None, None)
    for idx, group in enumerate(first_pass):
        meta = append_completion_group(comps, meta, idx, group, None if first_meta is None else first_meta[idx])
        assert_prompt_aligned(prompts, answers, comps, meta)

    state = AggregatedGenerationState(comps, meta)
    generator = RecordingGenerator(random.Random(seed), state, prompts, expected)
    retry_incomplete_prompts(prompts, generator, expected, state, max_retry_rounds, generation_stats=stats)
    assert_prompt_aligned(prompts, answers, state.completions, state.metadata)

    limit = determine_retry_limit(expected, max_retry_rounds)
    assert len(generator.calls) <= limit
    still_pending = pending_generation_indices(state.completions, expected)
    assert len(generator.calls) == limit or not still_pending
    asked = {prompt for call_prompts, _ in generator.calls for prompt in call_prompts}
    assert stats == {"retry_rounds": len(generator.calls), "retried_prompts": len(asked)}
    for idx, (before, after) in enumerate(zip(first_pass, state.completions, strict=True)):
        assert after[: len(before)] == before
        assert len(after) <= max(len(before), expected)
        assert (len(after) < expected) == (idx in still_pending)

    comps, meta, partial = truncate_to_expected_counts(state.completions, state.metadata, expected)
    assert_prompt_aligned(prompts, answers, comps, meta)
    assert all(len(group) <= expected for group in comps)
    assert partial == sum(1 for group in comps if 0 < len(group) < expected)

    kept_prompts, kept_answers, comps, meta = drop_empty_prompt_groups(prompts, answers, comps, meta, stats)
    assert_prompt_aligned(kept_prompts, kept_answers, comps, meta)
    assert all(comps)
    kept_prompts, kept_answers, comps, meta, dropped = drop_incomplete_prompt_groups(
        kept_prompts, kept_answers, comps, meta, expected, stats
    )
    assert_prompt_aligned(kept_prompts, kept_answers, comps, meta)
    assert all(len(group) == expected for group in comps)
    assert stats["dropped_prompts"] == len(prompts) - len(kept_prompts)
    assert dropped == partial

    flat, flat_answers = flatten_prompt_completions(GenerationBatch(kept_prompts, kept_answers, comps, meta))
    assert len(flat.prompts) == len(flat.completions) == len(flat_answers) == expected * len(kept_prompts)
    for prompt, completion, answer in zip(flat.prompts, flat.completions, flat_answers, strict=True):
        assert owner(completion) == prompt
        assert answer == f"answer of {prompt}"
    if flat.metadata is not None:
        assert len(flat.metadata) == len(flat.completions)
        for prompt, entry in zip(flat.prompts, flat.metadata, strict=True):
            assert entry is None or entry["prompt"] == prompt


@PROPERTY_SETTINGS
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=6), max_size=8),
    meta_sizes=st.lists(st.integers(min_value=0, max_value=8), max_size=8),
    expected=st.integers(min_value=1, max_value=5),
    track_metadata=st.booleans(),
)
def test_drop_then_flatten_keeps_pairs_aligned(
    sizes: list[int], meta_sizes: list[int], expected: int, track_metadata: bool
) -> None:
    prompts = [f"prompt {idx}" for idx in range(len(sizes))]
    answers = [f"answer of {p}" for p in prompts]
    comps = [[completion_for(p, slot) for slot in range(size)] for p, size in zip(prompts, sizes, strict=True)]
    meta: list[list[object | None]] | None = None
    if track_metadata:
        meta_counts = [*meta_sizes, *([0] * len(sizes))][: len(sizes)]
        meta = [[Payload(p, slot) for slot in range(size)] for p, size in zip(prompts, meta_counts, strict=True)]
    stats: dict[str, int] = {}
    kept = drop_empty_prompt_groups(prompts, answers, comps, meta, stats)
    flat, flat_answers = flatten_prompt_completions(GenerationBatch(*kept))
    assert stats["dropped_prompts"] == sizes.count(0)
    assert flat.completions == [completion for group in comps for completion in group]
    assert [owner(c) for c in flat.completions] == flat.prompts
    assert flat_answers == [f"answer of {p}" for p in flat.prompts]
    if meta is None:
        assert flat.metadata is None
    else:
        assert flat.metadata is not None
        assert len(flat.metadata) == len(flat.completions)
        for completion, entry in zip(flat.completions, flat.metadata, strict=True):
            assert entry is None or completion == completion_for(entry["prompt"], entry["slot"])

    kept_prompts, kept_answers, kept_comps, kept_meta, dropped = drop_incomplete_prompt_groups(
        prompts, answers, comps, meta, expected, stats
    )
    assert dropped == sum(1 for size in sizes if size != expected)
    flat, flat_answers = flatten_prompt_completions(GenerationBatch(kept_prompts, kept_answers, kept_comps, kept_meta))
    assert len(flat.completions) == expected * len(kept_prompts)
    assert [owner(c) for c in flat.completions] == flat.prompts
    assert flat_answers == [f"answer of {p}" for p in flat.prompts]


@PROPERTY_SETTINGS
@given(
    appends=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=4),
            st.integers(min_value=0, max_value=4),
            st.one_of(st.none(), st.integers(min_value=0, max_value=6)),
        ),
        max_size=12,
    ),
)
def test_appends_only_touch_their_own_prompt(appends: list[tuple[int, int, int | None]]) -> None:
    prompts = [f"prompt {idx}" for idx in range(5)]
    comps, meta = seed_generation_groups(len(prompts), None, None)
    slot = 0
    for prompt_idx, count, meta_count in appends:
        prompt = prompts[prompt_idx]
        new = [completion_for(prompt, s) for s in range(slot, slot + count)]
        new_meta = None if meta_count is None else [Payload(prompt, s) for s in range(slot, slot + meta_count)]
        slot += count
        before = [list(group) for group in comps]
        meta = append_completion_group(comps, meta, prompt_idx, new, new_meta)
        assert comps[prompt_idx] == before[prompt_idx] + new
        assert all(comps[idx] == before[idx] for idx in range(len(prompts)) if idx != prompt_idx)
        assert_prompt_aligned(prompts, [f"answer of {p}" for p in prompts], comps, meta)
        if meta is not None:
            for completion, entry in zip(chain_groups(comps), chain_groups(meta), strict=True):
                assert entry is None or completion == completion_for(entry.prompt, entry.slot)


def chain_groups(groups: list[list[Any]]) -> list[Any]:
    return [item for group in groups for item in group]
