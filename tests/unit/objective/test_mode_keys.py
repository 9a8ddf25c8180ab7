"""Mode keys: built-in extractors, resolving names / dotted paths / callables, mode ids and the coverage metric."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import pytest
import torch

from maxent_grpo.objective.mode_keys import (
    BUILTIN_MODE_KEYS,
    answer_keys,
    assign_mode_ids,
    boxed,
    final_answer,
    first_token,
    last_line,
    mode_coverage,
    resolve_mode_key,
)
from maxent_grpo.objective.weights import compute_listwise
from maxent_grpo.rewards import vowel_start_reward
from maxent_grpo.tiny_model import build_tiny_tokenizer

# --- built-in extractors ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ids", "expected"),
    [
        ("  a b", None, "a"),
        ("\n\tE", [], "E"),
        ("abc", [5, 6, 7], 5),
        ("", None, None),
        ("   ", [], None),
    ],
)
def test_first_token(text: str, ids: list[int] | None, expected: Hashable | None) -> None:
    assert first_token(text, ids) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("step 1\nstep 2\n\n  42  \n\n", "42"), ("only", "only"), ("", None), ("\n  \n", None)],
)
def test_last_line(text: str, expected: str | None) -> None:
    assert last_line(text, None) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so \\boxed{1} or rather \\boxed{ \\frac{1}{2} } done", "\\frac{1}{2}"),
        ("\\boxed{{a}}", "{a}"),
        ("first \\boxed{3} then a truncated \\boxed{4", "3"),
        ("no answer here", None),
        ("\\boxed{  }", None),
        ("\\boxed{x", None),
    ],
)
def test_boxed(text: str, expected: str | None) -> None:
    assert boxed(text, None) == expected


@pytest.mark.parametrize(
    "spellings",
    [
        ["12", "12.", "The answer is 12", "7 + 5 = **12**", "7 + 5 = 12.", " 12.0\n", "\\boxed{12}", "+12"],
        ["1,200.50", "It costs 1200.5 dollars", "\\boxed{ 1200.50 }"],
        ["-3", "x = −3.", "so x is -3.00", "-03"],
        ["17", "17 is a prime number below 50.", "A prime below 50: 17", "The answer is **17** (below 50)", "017"],
        ["3/4", "The answer is 3/4."],
        ["Paris.", "The answer is paris", "**Paris**", "Answer: PARIS!"],
        ["\\boxed{x+1}", "so \\boxed{ x+1 }"],
    ],
)
def test_final_answer_gives_every_spelling_of_one_answer_one_mode(spellings: list[str]) -> None:
    assert len({final_answer(text) for text in spellings}) == 1, [final_answer(text) for text in spellings]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2 + 3 = 5. Wait, 2 + 3 = 6", "6"),  # the last number is the final answer
        ("12", "12"),
        ("120", "120"),  # trailing zeros of an integer stay
        ("0.0", "0"),
        ("-0", "0"),
        ("-0.50", "-0.5"),
        ("000", "0"),
        ("Step 1: 3 + 4 = 7\nStep 2: 7 x 2 = 14\nSo 14 it is.", "14"),
        ("v1.2 is out", "v1.2 is out"),  # a number inside a word is no number
        ("", None),
        (" \n ", None),
        ("...", None),
    ],
)
def test_final_answer_values(text: str, expected: str | None) -> None:
    assert final_answer(text) == expected


def test_final_answer_separates_different_numbers() -> None:
    assert len({final_answer(text) for text in ["12", "13", "15", "1.2", "21", "-12"]}) == 6


# --- resolve_mode_key ------------------------------------------------------------------------------------------------


def test_builtin_names_resolve_to_the_builtins() -> None:
    assert set(BUILTIN_MODE_KEYS) == {"first_token", "last_line", "boxed", "final_answer"}
    for name, key in BUILTIN_MODE_KEYS.items():
        assert resolve_mode_key(name) is key
    assert resolve_mode_key(None) is None


@pytest.mark.parametrize("path", ["os.path:basename", "os.path.basename"])
def test_dotted_path_imports_a_text_only_function(path: str) -> None:
    key = resolve_mode_key(path)
    assert key is not None
    assert key("answers/final/42", [1, 2]) == "42"


def test_dotted_path_to_a_nested_attribute() -> None:
    key = resolve_mode_key("builtins:str.strip")
    assert key is not None
    assert key("  x ", None) == "x"


def test_callables_with_and_without_completion_ids() -> None:
    def with_ids(text: str, completion_ids: Sequence[int] | None) -> Hashable | None:
        return (text, None if completion_ids is None else tuple(completion_ids))

    two = resolve_mode_key(with_ids)
    one = resolve_mode_key(str.upper)
    assert two is not None and one is not None
    assert two("a", [1, 2]) == ("a", (1, 2))
    assert one("a", [1, 2]) == "A"
    assert two.__name__ == "with_ids"


def test_unhashable_answers_are_reported() -> None:
    key = resolve_mode_key(str.split)
    assert key is not None
    with pytest.raises(TypeError, match="unhashable list"):
        key("a b", None)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("first_char", r"unknown mode key 'first_char'.*\['boxed', 'final_answer', 'first_token', 'last_line'\]"),
        ("no_such_package_xyz.module:key", "cannot import module 'no_such_package_xyz.module'"),
        ("os.path:no_such_function", "module 'os.path' has no attribute 'no_such_function'"),
        ("os:sep", "not callable"),
        (":key", "not a dotted path"),
        (lambda: "x", "must accept"),
        (3, "must be None, a string or a callable"),
    ],
)
def test_bad_specs_raise_clear_errors(spec: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        resolve_mode_key(spec)  # type: ignore[arg-type]


# --- mode ids and coverage -------------------------------------------------------------------------------------------


def test_assign_mode_ids_first_seen_order_and_singleton_nones() -> None:
    ids = assign_mode_ids([["a", "b", "a", None, None, "b"], [7, 7, 7, 7, 7, 7], [None, "z", "z", 1, "z", 1]])
    assert ids.dtype == torch.long
    assert ids.tolist() == [[0, 1, 0, 2, 3, 1], [0] * 6, [0, 1, 1, 2, 1, 2]]


def test_assign_mode_ids_edge_cases() -> None:
    assert assign_mode_ids([]).shape == (0, 0)
    with pytest.raises(ValueError, match="equal size"):
        assign_mode_ids([["a"], ["a", "b"]])


def test_mode_coverage_counts_distinct_correct_modes() -> None:
    keys = [["a", "a", "b", "c"], ["x", None, None, "x"]]
    rewards = [[1.0, 1.0, 0.0, 1.0], [1.0, 1.0, 1.0, math.nan]]
    # Group 0: {a, c} -> 2. Group 1: x plus two singleton None modes -> 3.
    assert mode_coverage(keys, rewards, threshold=1.0) == 2.5
    assert mode_coverage(keys, torch.tensor(rewards), threshold=0.5) == 2.5
    assert mode_coverage(keys, rewards, threshold=2.0) == 0.0
    assert mode_coverage([], [], threshold=1.0) == 0.0
    with pytest.raises(ValueError, match="same"):
        mode_coverage(keys, [[1.0]], threshold=1.0)


def test_vowel_group_end_to_end() -> None:
    # "pick a vowel:" with a character-level tokenizer: reward 1 for a vowel, the first token is the answer.
    completions = ["a", "a", "a", "a", "a", "e", "x", "y"]
    key = resolve_mode_key("first_token")
    assert key is not None
    keys = [[key(text, [ord(text)]) for text in completions]]
    rewards = torch.tensor([[1.0 if text in "aeiou" else 0.0 for text in completions]], dtype=torch.float64)
    result = compute_listwise(rewards, tau=0.0, q_temperature=1.0, q_epsilon=0.0, mode_ids=assign_mode_ids(keys))
    # tau = 0: the two correct modes share the weight equally, however often each was sampled.
    expected = [0.1] * 5 + [0.5, 0.0, 0.0]
    torch.testing.assert_close(result.weights, torch.tensor([expected], dtype=torch.float64), atol=1e-12, rtol=0)
    assert mode_coverage(keys, rewards, threshold=1.0) == 2.0


# --- canonical answers -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(BUILTIN_MODE_KEYS))
def test_prefixed_spellings_of_one_answer_share_a_mode(name: str) -> None:
    # What a backend hands the trainer: generated ids decoded with special tokens skipped, as the rewards see them.
    tokenizer = build_tiny_tokenizer()
    generated = ["a", "<bos>a", " a", "<pad><bos>  a", "\na", "e", "<eos>e"]
    ids = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text)) for text in generated]
    texts = tokenizer.batch_decode(ids, skip_special_tokens=True)
    assert texts[1:5] == ["a", " a", "  a", "\na"]

    answers = [f"\\boxed{{{text}}}" for text in texts] if name == "boxed" else texts
    keys = answer_keys(BUILTIN_MODE_KEYS[name], answers, tokenizer)
    assert len(set(keys[:5])) == 1 and len(set(keys[5:])) == 1 and keys[0] != keys[5]
    assert vowel_start_reward(texts) == [1.0] * 7
    assert mode_coverage([keys], [vowel_start_reward(texts)], threshold=1.0) == 2.0


def test_answer_keys_pass_the_ids_of_the_stripped_answer() -> None:
    tokenizer = build_tiny_tokenizer()
    seen = []

    def key(text: str, completion_ids: Sequence[int] | None) -> str:
        seen.append((text, list(completion_ids or [])))
        return text.strip()

    assert answer_keys(key, ["  hi", ""], tokenizer) == ["hi", ""]
    assert seen == [("  hi", tokenizer("hi", add_special_tokens=False)["input_ids"]), ("", [])]
    assert answer_keys(key, [], tokenizer) == []
    assert answer_keys(first_token, ["   "], tokenizer) == [None]
