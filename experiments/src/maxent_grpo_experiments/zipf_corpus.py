"""The supervised corpus of a held-out benchmark's base model: a Zipf preference over correct answers, and wrong ones.

Both digit tasks (`maxent_grpo_experiments.digit_sums`, `maxent_grpo_experiments.digit_derivations`) pre-train their
base model on the same kind of corpus: per prompt, the correct answers in an order drawn per prompt, the r-th given
with weight ``1 / r ** zipf_exponent``, and a share of wrong examples, so that the base samples many correct answers
but not all, and wrong ones too. What a wrong example and a correct completion look like is the task's (`zipf_corpus`'s
callbacks).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

__all__ = ["zipf_corpus"]


def zipf_corpus(
    prompts: Sequence[str],
    per_prompt: int,
    wrong_fraction: float,
    zipf_exponent: float,
    seed: int,
    *,
    correct_answers: Callable[[str], Sequence[str]],
    right: Callable[[str, str], str],
    wrong: Callable[[str, list[str], random.Random], str],
) -> list[tuple[str, str]]:
    """``per_prompt`` (prompt, completion) pairs per prompt.

    Args:
        prompts: the prompts of the corpus.
        per_prompt: examples per prompt.
        wrong_fraction: the probability that an example is wrong.
        zipf_exponent: a correct example gives the r-th answer of a per-prompt random order with weight
            ``1 / r ** zipf_exponent``.
        seed: the seed of the orders and the draws.
        correct_answers: a prompt's correct answers.
        right: the completion of a correct answer, ``right(prompt, answer)``.
        wrong: a wrong completion, ``wrong(prompt, answers, rng)``, drawn with ``rng`` (``answers``: the prompt's
            correct answers in their drawn order).

    Returns:
        The pairs, prompt by prompt.

    Raises:
        ValueError: when ``wrong_fraction`` is not in [0, 1).
    """
    if not 0 <= wrong_fraction < 1:
        raise ValueError(f"wrong_fraction={wrong_fraction} is invalid: expected a number in [0, 1)")
    rng = random.Random(seed)
    corpus: list[tuple[str, str]] = []
    for prompt in prompts:
        answers = list(correct_answers(prompt))
        rng.shuffle(answers)
        weights = [1 / (rank + 1) ** zipf_exponent for rank in range(len(answers))]
        for _ in range(per_prompt):
            if rng.random() < wrong_fraction:
                corpus.append((prompt, wrong(prompt, answers, rng)))
            else:
                corpus.append((prompt, right(prompt, rng.choices(answers, weights)[0])))
    return corpus
