"""The single-prompt tasks with several correct answers, each with its reward and the figures of its sampled answers.

Three tasks of the tiny model (`maxent_grpo.tiny_model`, character-level tokenizer) that share one shape: one prompt,
a set of equally correct answers, a reward of 1.0 for a completion whose answer is one of them and 0.0 otherwise.

- `VOWEL` (``benchmarks/mode_coverage.py``): "pick a vowel:", the answer is the completion's first non-whitespace
  character, five correct answers among the printable characters, 2-token completions (only the first counts, so an
  answer spans many completions).
- `DIGITS` (``benchmarks/pass_at_k.py``): "10=", the answer is the whole completion, stripped; nine correct answers
  (19, 28, ..., 91) among the hundred two-digit ones, over a tokenizer of the digits and "=" only.
- `FOUR` (``benchmarks/defaults_study.py``): "pick 1, 2, 3 or 4:", the answer is a one-token completion; four correct
  answers among the printable characters. No setting of the objective was ever chosen on it.

The figures of a trained model (`AnswerTask.evaluate`) are those of the objective benchmarks: the mean reward of the
sampled answers and the entropy of the correct ones' empirical distribution divided by the log of the number of
correct answers (1.0: every correct answer equally often; 0.0: one answer).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from maxent_grpo.rewards import VOWELS, completion_text, first_character
from maxent_grpo.single_prompt_task import SinglePromptTask

__all__ = ["DIGITS", "FOUR", "TASKS", "VOWEL", "AnswerTask"]


def _stripped(completion: str | list[dict[str, Any]]) -> str:
    return completion_text(completion).strip()


@dataclass(frozen=True)
class AnswerTask:
    """A single-prompt task whose reward is 1.0 when a completion's answer is one of ``correct``.

    Attributes:
        name: the task's key in the benchmarks' JSON.
        task: the prompt and training settings (MaxEnt at the config defaults: no ``maxent_settings``).
        correct: the correct answers.
        answer: the answer of a completion (plain text or conversational).
    """

    name: str
    task: SinglePromptTask
    correct: frozenset[str]
    answer: Callable[[str | list[dict[str, Any]]], str]

    def reward(self, completions: list, **kwargs: Any) -> list[float]:
        """1.0 for each completion whose answer is correct, else 0.0 (a TRL reward function)."""
        return [float(self.answer(c) in self.correct) for c in completions]

    def evaluate(self, answers: Sequence[str]) -> dict[str, Any]:
        """Mean reward, normalized answer entropy, distinct correct answers and per-answer counts of ``answers``.

        Returns:
            ``mean_reward``; ``normalized_entropy``: the entropy of the correct answers' empirical distribution
            divided by ln(number of correct answers), 0.0 when none is correct; ``distinct_correct``; and
            ``answer_counts``, every correct answer (sorted) with its count.

        Raises:
            ValueError: ``answers`` is empty.
        """
        if not answers:
            raise ValueError("evaluate needs at least one answer")
        given = [self.answer(a) for a in answers]
        counts = Counter(a for a in given if a in self.correct)
        total = sum(counts.values())
        entropy = sum(n / total * math.log(total / n) for n in counts.values()) if total else 0.0
        return {
            "mean_reward": statistics.fmean(a in self.correct for a in given),
            "normalized_entropy": entropy / math.log(len(self.correct)),
            "distinct_correct": len(counts),
            "answer_counts": {a: counts.get(a, 0) for a in sorted(self.correct)},
        }


VOWEL = AnswerTask(
    name="vowel",
    task=SinglePromptTask(prompt="pick a vowel:", mode_key="first_token"),
    correct=frozenset(VOWELS),
    answer=first_character,
)
DIGITS = AnswerTask(
    name="digits",
    task=SinglePromptTask(prompt="10=", mode_key="last_line", alphabet="0123456789="),
    correct=frozenset(f"{a}{10 - a}" for a in range(1, 10)),
    answer=_stripped,
)
FOUR = AnswerTask(
    name="four",
    task=SinglePromptTask(prompt="pick 1, 2, 3 or 4:", mode_key="first_token", max_completion_length=1),
    correct=frozenset("1234"),
    answer=_stripped,
)
#: The tasks by name, in the order the defaults study runs them.
TASKS: dict[str, AnswerTask] = {t.name: t for t in (VOWEL, FOUR, DIGITS)}
