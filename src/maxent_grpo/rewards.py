"""Reward functions used by the examples, the demo, the recipes and the benchmarks.

Each follows TRL's reward-function signature: keyword arguments ``prompts``, ``completions``, ``completion_ids`` and
every dataset column, returning one float (or None) per completion. Conversational completions (lists of messages)
are scored on the last message's content.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from maxent_grpo.objective.mode_keys import boxed

VOWELS = "aeiou"


def completion_text(completion: str | list[dict[str, Any]]) -> str:
    """The text of a completion, whether plain or conversational."""
    if isinstance(completion, str):
        return completion
    return str(completion[-1]["content"]) if completion else ""


def first_character(completion: str | list[dict[str, Any]]) -> str:
    """The answer of the vowel task: the completion's first non-whitespace character ('' when there is none)."""
    return completion_text(completion).lstrip()[:1]


def vowel_start_reward(completions: list, **kwargs: Any) -> list[float]:
    """1.0 when the completion's first non-whitespace character is a lower-case vowel, else 0.0 (mode coverage)."""
    return [float(first_character(c) in set(VOWELS)) for c in completions]


def unique_chars_reward(completions: list, **kwargs: Any) -> list[float]:
    """Number of distinct characters in the completion (the reward of the TRL pull-request benchmark)."""
    return [float(len(set(completion_text(c)))) for c in completions]


def _normalize_answer(answer: str) -> str:
    return answer.strip().rstrip(".").replace(" ", "").removeprefix("$").removesuffix("$")


def boxed_answer_reward(completions: list, answer: list[str], **kwargs: Any) -> list[float]:
    """1.0 when the last ``\\boxed{}`` of the completion equals the dataset's ``answer`` column (normalised)."""
    rewards = []
    for completion, reference in zip(completions, answer, strict=True):
        predicted = boxed(completion_text(completion))
        rewards.append(float(predicted is not None and _normalize_answer(predicted) == _normalize_answer(reference)))
    return rewards


REWARDS: dict[str, Callable[..., list[float]]] = {
    "vowel_start": vowel_start_reward,
    "unique_chars": unique_chars_reward,
    "boxed_answer": boxed_answer_reward,
}
