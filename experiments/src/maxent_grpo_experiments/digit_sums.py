"""The digit-sum task of `benchmarks/reasoning_boundary.py`: many prompts, several correct answers, graded difficulty.

A prompt ``"ab="`` (two digits) asks for any two digits ``cd`` with ``c + d == a + b``. The number of correct answers
is ``min(s, 18 - s) + 1`` for the sum ``s``: one for "00=" and "99=", ten for a sum of 9. Twenty-four of the hundred
prompts are held out and never trained on: the twenty with ``(a + 3b) mod 5 == 0`` (sums 0 to 17, one to ten correct
answers), which share the task's structure with the training prompts, and every prompt of the hardest sums, 0, 1, 17
and 18 (one or two correct answers; four more prompts), whose answers no training prompt has. The supervised corpus of
the base model gives each of the 76 training prompts a skewed (Zipf) preference over its correct answers, in an order
drawn per prompt, plus a share of random wrong pairs, so that the base samples many correct answers but not all, and
wrong ones too: that is all it has to reach the hardest held-out prompts.
"""

from __future__ import annotations

import random

from maxent_grpo_experiments.zipf_corpus import zipf_corpus

__all__ = [
    "HARDEST_SUMS",
    "PROMPTS",
    "correct_answers",
    "heldout_prompts",
    "is_correct",
    "sample_corpus",
    "training_prompts",
]

#: Every prompt of the task, "00=" to "99=".
PROMPTS = tuple(f"{a}{b}=" for a in range(10) for b in range(10))


def _digits(prompt: str) -> tuple[int, int]:
    if len(prompt) != 3 or not prompt[:2].isdigit() or prompt[2] != "=":
        raise ValueError(f"expected a prompt of two digits and '=', got {prompt!r}")
    return int(prompt[0]), int(prompt[1])


def correct_answers(prompt: str) -> tuple[str, ...]:
    """The two-digit answers whose digits sum to the prompt's, in increasing order."""
    total = sum(_digits(prompt))
    return tuple(f"{c}{total - c}" for c in range(max(0, total - 9), min(total, 9) + 1))


def is_correct(prompt: str, completion: str) -> bool:
    """Whether ``completion``, surrounding whitespace stripped, is a correct answer to ``prompt``."""
    return completion.strip() in correct_answers(prompt)


#: The sums with one or two correct answers, held out entirely.
HARDEST_SUMS = frozenset({0, 1, 17, 18})


def _held_out(prompt: str) -> bool:
    a, b = _digits(prompt)
    return (a + 3 * b) % 5 == 0 or a + b in HARDEST_SUMS


def heldout_prompts() -> tuple[str, ...]:
    """The twenty-four prompts never trained on."""
    return tuple(p for p in PROMPTS if _held_out(p))


def training_prompts() -> tuple[str, ...]:
    """The seventy-six prompts of the base model's corpus and of the RL runs."""
    return tuple(p for p in PROMPTS if not _held_out(p))


def _wrong_pair(prompt: str, answers: list[str], rng: random.Random) -> str:
    """A random two-digit pair that is not one of ``answers``."""
    return rng.choice([f"{c}{d}" for c in range(10) for d in range(10) if f"{c}{d}" not in answers])


def sample_corpus(
    prompts: tuple[str, ...], per_prompt: int, wrong_fraction: float, zipf_exponent: float, seed: int
) -> list[tuple[str, str]]:
    """``per_prompt`` (prompt, answer) pairs per prompt: a random wrong pair with probability ``wrong_fraction``, else
    a correct answer, the r-th of a per-prompt random order with weight ``1 / r ** zipf_exponent``
    (`maxent_grpo_experiments.zipf_corpus.zipf_corpus`).

    Raises:
        ValueError: when ``wrong_fraction`` is not in [0, 1).
    """
    corpus_of = {"correct_answers": correct_answers, "right": lambda prompt, answer: answer, "wrong": _wrong_pair}
    return zipf_corpus(prompts, per_prompt, wrong_fraction, zipf_exponent, seed, **corpus_of)
