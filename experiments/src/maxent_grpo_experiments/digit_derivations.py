"""The task of `benchmarks/multi_token_answers.py`: an exact multi-token derivation, then one of several answers.

A prompt ``"abc:"`` (three digits with ``a + b + c <= 18``) asks for a derivation, the digits' sum written out as
``"a+b+c=ss"`` (the sum ``s`` on two digits, zero-padded), then on a last line of its own any two digits ``de`` with
``d + e == s``: ``"347:"`` -> ``"3+4+7=14\\n59"``. The derivation is one fixed string per prompt, eight characters
that must all be exact; the answer has ``min(s, 18 - s) + 1`` correct values (one for a sum of 0 or 18, ten for a sum
of 9), so difficulty is graded. Every completion is eleven characters, twelve tokens with the EOS token under a
one-character-one-token tokenizer. `grade` scores a completion: correct (reward 1.0) only when it is exactly a
prompt's derivation, a newline and a correct answer; "derivation exact" when its first line is the derivation.

Of the 835 prompts, 38 are held out and never trained on: the four of the hardest sums, 0 and 1 (one or two correct
answers; no training derivation ends in their sum, which the base model meets only in the slips of its corpus), and two
of every other sum (one to ten correct answers), drawn once with a fixed seed. The supervised corpus of the base model
gives each training prompt a skewed (Zipf) preference over its correct answers, in an order drawn per prompt, plus a
share of wrong examples: half of them a slip in the derivation (the sum off by one to three, followed by an answer that
fits the wrong sum), half the right derivation followed by two digits of another sum.
"""

from __future__ import annotations

import random
from typing import NamedTuple

from maxent_grpo_experiments.zipf_corpus import zipf_corpus

__all__ = [
    "COMPLETION_CHARACTERS",
    "HARDEST_SUMS",
    "MAX_SUM",
    "PROMPTS",
    "Grade",
    "completion",
    "correct_answers",
    "correct_completions",
    "derivation",
    "grade",
    "heldout_prompts",
    "is_correct",
    "prompt_sum",
    "sample_corpus",
    "training_prompts",
]

#: The largest digit sum of a prompt: two digits ``de`` reach at most 18.
MAX_SUM = 18

#: Every prompt of the task, ``"abc:"`` for the 835 digit triples with ``a + b + c <= 18``, in increasing order.
PROMPTS = tuple(f"{a}{b}{c}:" for a in range(10) for b in range(10) for c in range(10) if a + b + c <= MAX_SUM)

#: Characters of a completion: the eight of the derivation, the newline and the two of the answer (EOS not counted).
COMPLETION_CHARACTERS = 11

#: The sums whose every prompt is held out: one or two correct answers, and a result no training derivation has.
HARDEST_SUMS = frozenset({0, 1})

#: Held-out prompts per other digit sum, and the seed that draws them.
_HELDOUT_PER_SUM = 2
_HELDOUT_SEED = 0

_PROMPT_SET = frozenset(PROMPTS)


def _digits(prompt: str) -> tuple[int, int, int]:
    if prompt not in _PROMPT_SET:
        raise ValueError(f"expected a prompt of three digits summing to at most {MAX_SUM} and ':', got {prompt!r}")
    return int(prompt[0]), int(prompt[1]), int(prompt[2])


def prompt_sum(prompt: str) -> int:
    """The sum of the prompt's three digits."""
    return sum(_digits(prompt))


def derivation(prompt: str) -> str:
    """The derivation the prompt requires: ``"3+4+7=14"`` for ``"347:"`` (the sum on two digits, ``"1+0+2=03"``)."""
    a, b, c = _digits(prompt)
    return f"{a}+{b}+{c}={a + b + c:02d}"


def _pairs(total: int) -> tuple[str, ...]:
    """The two-digit strings whose digits sum to ``total``, in increasing order (none outside 0 to 18)."""
    return tuple(f"{d}{total - d}" for d in range(max(0, total - 9), min(total, 9) + 1))


def correct_answers(prompt: str) -> tuple[str, ...]:
    """The final answers that are correct: the two-digit strings whose digits sum to the prompt's, increasing."""
    return _pairs(prompt_sum(prompt))


def completion(prompt: str, answer: str) -> str:
    """The prompt's derivation, a newline and ``answer``: the completion of that answer."""
    return f"{derivation(prompt)}\n{answer}"


def correct_completions(prompt: str) -> tuple[str, ...]:
    """Every completion that `grade` marks correct, one per correct answer, in the order of `correct_answers`."""
    return tuple(completion(prompt, answer) for answer in correct_answers(prompt))


class Grade(NamedTuple):
    """The verdict on one completion: whether its first line is the prompt's derivation, and whether it is
    correct (the exact derivation, a newline and a correct answer, nothing else)."""

    derivation_exact: bool
    correct: bool


def grade(prompt: str, text: str) -> Grade:
    """Grade the completion ``text`` of ``prompt``; nothing is stripped, since every character is a token the
    model had to get right."""
    first, newline, answer = text.partition("\n")
    exact = first == derivation(prompt)
    return Grade(exact, exact and bool(newline) and answer in correct_answers(prompt))


def is_correct(prompt: str, text: str) -> bool:
    """Whether ``text`` is a correct completion of ``prompt`` (see `grade`)."""
    return grade(prompt, text).correct


def _heldout() -> frozenset[str]:
    rng = random.Random(_HELDOUT_SEED)
    chosen = [p for p in PROMPTS if prompt_sum(p) in HARDEST_SUMS]
    for total in range(max(HARDEST_SUMS) + 1, MAX_SUM + 1):
        same_sum = [p for p in PROMPTS if prompt_sum(p) == total]
        chosen += rng.sample(same_sum, _HELDOUT_PER_SUM)
    return frozenset(chosen)


_HELDOUT = _heldout()


def heldout_prompts() -> tuple[str, ...]:
    """The thirty-eight prompts never trained on, in increasing order: every prompt of `HARDEST_SUMS`, and two of every
    other sum."""
    return tuple(p for p in PROMPTS if p in _HELDOUT)


def training_prompts() -> tuple[str, ...]:
    """The 797 prompts of the base model's corpus and of the RL runs, in increasing order."""
    return tuple(p for p in PROMPTS if p not in _HELDOUT)


def _wrong_example(prompt: str, answers: list[str], rng: random.Random) -> str:
    """A wrong completion: a slip in the sum with an answer that fits it, or the right derivation and a wrong pair."""
    a, b, c = _digits(prompt)
    total = a + b + c
    if rng.random() < 0.5:
        slips = [total + d for d in (-3, -2, -1, 1, 2, 3) if 0 <= total + d <= MAX_SUM]
        wrong_total = rng.choice(slips)
        return f"{a}+{b}+{c}={wrong_total:02d}\n{rng.choice(_pairs(wrong_total))}"
    wrong = [f"{d}{e}" for d in range(10) for e in range(10) if f"{d}{e}" not in answers]
    return completion(prompt, rng.choice(wrong))


def sample_corpus(
    prompts: tuple[str, ...], per_prompt: int, wrong_fraction: float, zipf_exponent: float, seed: int
) -> list[tuple[str, str]]:
    """``per_prompt`` (prompt, completion) pairs per prompt.

    Args:
        prompts: the prompts of the corpus.
        per_prompt: examples per prompt.
        wrong_fraction: the probability that an example is wrong; half of the wrong ones slip in the derivation (the
            sum off by one to three, followed by an answer to the wrong sum), half give the right derivation and two
            digits of another sum.
        zipf_exponent: a correct example gives the r-th answer of a per-prompt random order with weight
            ``1 / r ** zipf_exponent``.
        seed: the seed of the orders and the draws (`maxent_grpo_experiments.zipf_corpus.zipf_corpus`).

    Raises:
        ValueError: when ``wrong_fraction`` is not in [0, 1).
    """
    corpus_of = {"correct_answers": correct_answers, "right": completion, "wrong": _wrong_example}
    return zipf_corpus(prompts, per_prompt, wrong_fraction, zipf_exponent, seed, **corpus_of)
