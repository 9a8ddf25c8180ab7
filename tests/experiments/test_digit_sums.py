"""The digit-sum task of the reasoning-boundary benchmark: answers, the held-out split and the base model's corpus."""

from __future__ import annotations

from collections import Counter

import pytest

from maxent_grpo_experiments.digit_sums import (
    PROMPTS,
    correct_answers,
    heldout_prompts,
    is_correct,
    sample_corpus,
    training_prompts,
)


def test_correct_answers_are_the_digit_pairs_with_the_prompts_sum() -> None:
    assert correct_answers("00=") == ("00",)
    assert correct_answers("99=") == ("99",)
    assert correct_answers("12=") == ("03", "12", "21", "30")
    assert correct_answers("54=") == tuple(f"{c}{9 - c}" for c in range(10))
    assert correct_answers("98=") == ("89", "98")
    assert is_correct("12=", " 21\n") and not is_correct("12=", "22") and not is_correct("12=", "3")
    with pytest.raises(ValueError, match="two digits and '='"):
        correct_answers("1+2=")


def test_held_out_prompts_span_every_difficulty_and_include_every_prompt_of_the_hardest_sums() -> None:
    heldout, training = heldout_prompts(), training_prompts()
    assert (len(PROMPTS), len(heldout), len(training)) == (100, 24, 76)
    assert set(heldout).isdisjoint(training) and set(heldout) | set(training) == set(PROMPTS)
    assert sorted({len(correct_answers(p)) for p in heldout}) == list(range(1, 11))
    assert {"00=", "01=", "10=", "89=", "98=", "99="} <= set(heldout)
    assert all(2 <= int(p[0]) + int(p[1]) <= 16 for p in training)
    assert {int(p[0]) + int(p[1]) for p in training} == set(range(2, 17))


def test_the_corpus_skews_towards_one_correct_answer_and_mixes_in_wrong_ones() -> None:
    corpus = sample_corpus(("54=",), per_prompt=4000, wrong_fraction=0.25, zipf_exponent=1.0, seed=0)
    assert len(corpus) == 4000 and {p for p, _ in corpus} == {"54="}
    counts = Counter(answer for _, answer in corpus)
    wrong = sum(n for answer, n in counts.items() if not is_correct("54=", answer))
    assert wrong / 4000 == pytest.approx(0.25, abs=0.03)
    ranked = sorted((counts[a] for a in correct_answers("54=")), reverse=True)
    # Zipf over ten answers: the favourite has 1 / H_10 = 34% of the correct ones, the tenth 3.4%.
    assert ranked[0] / sum(ranked) == pytest.approx(0.341, abs=0.03)
    assert ranked[-1] / sum(ranked) == pytest.approx(0.034, abs=0.015)
    assert sample_corpus(("54=",), 50, 0.25, 1.0, seed=1) == sample_corpus(("54=",), 50, 0.25, 1.0, seed=1)
    with pytest.raises(ValueError, match=r"wrong_fraction=1\.0 is invalid"):
        sample_corpus(("54=",), 1, 1.0, 1.0, seed=0)
