"""The task of the multi-token-answers benchmark: derivations, answers, the grader, the split and the base's corpus."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from maxent_grpo.tiny_model import build_tiny_tokenizer
from maxent_grpo_experiments.digit_derivations import (
    COMPLETION_CHARACTERS,
    HARDEST_SUMS,
    MAX_SUM,
    PROMPTS,
    completion,
    correct_answers,
    correct_completions,
    derivation,
    grade,
    heldout_prompts,
    is_correct,
    prompt_sum,
    sample_corpus,
    training_prompts,
)

PROPERTY_SETTINGS = settings(max_examples=100, deadline=None)
prompts = st.sampled_from(PROMPTS)
#: Texts over the completion's characters, near-misses included (a character off, one missing, one too many).
texts = st.text(alphabet="0123456789+=\n", max_size=COMPLETION_CHARACTERS + 2)


def test_derivation_answers_and_grades_of_examples() -> None:
    assert derivation("347:") == "3+4+7=14" and derivation("102:") == "1+0+2=03"
    assert correct_answers("347:") == ("59", "68", "77", "86", "95")
    assert correct_answers("000:") == ("00",) and correct_answers("990:") == ("99",)
    assert completion("347:", "59") == "3+4+7=14\n59"
    assert grade("347:", "3+4+7=14\n59") == (True, True)
    assert grade("347:", "3+4+7=14\n58") == (True, False)  # the right derivation, a wrong answer
    assert grade("347:", "3+4+7=15\n69") == (False, False)  # a slip in the sum: the answer fits it, not the prompt
    assert grade("347:", "3+4+7=14\n59\n") == (True, False)  # nothing is stripped: every character is a token
    assert grade("347:", " 3+4+7=14\n59") == (False, False)
    assert grade("347:", "3+4+7=14") == (True, False) and grade("347:", "3+4+7=1459") == (False, False)
    assert not is_correct("347:", "3+4+7=14\n5")
    for bad in ("999:", "34:", "347=", "3a7:"):
        with pytest.raises(ValueError, match="three digits"):
            derivation(bad)


def test_every_completion_is_twelve_tokens_with_eos_under_the_character_tokenizer() -> None:
    tokenizer = build_tiny_tokenizer("0123456789+=:\n")
    for prompt in ("000:", "347:", "990:", "909:"):
        for text in correct_completions(prompt):
            ids = tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]
            assert len(text) == COMPLETION_CHARACTERS and len(ids) == 12
            assert tokenizer.decode(ids, skip_special_tokens=True) == text
        assert len(tokenizer(prompt)["input_ids"]) == 4


@PROPERTY_SETTINGS
@given(prompts, texts)
def test_a_correct_completion_has_the_exact_derivation_and_a_correct_last_line(prompt: str, text: str) -> None:
    verdict = grade(prompt, text)
    assert verdict.correct == (text in correct_completions(prompt))
    assert verdict.derivation_exact == (text.partition("\n")[0] == derivation(prompt))
    if verdict.correct:
        assert verdict.derivation_exact and text.splitlines()[-1] in correct_answers(prompt)


@PROPERTY_SETTINGS
@given(prompts)
def test_the_correct_answers_are_what_the_grader_accepts(prompt: str) -> None:
    accepted = [f"{d}{e}" for d in range(10) for e in range(10) if is_correct(prompt, completion(prompt, f"{d}{e}"))]
    assert tuple(accepted) == correct_answers(prompt)
    assert len(accepted) == min(prompt_sum(prompt), MAX_SUM - prompt_sum(prompt)) + 1
    assert correct_completions(prompt) == tuple(completion(prompt, answer) for answer in accepted)


def test_prompts_and_the_split() -> None:
    heldout, training = heldout_prompts(), training_prompts()
    assert (len(PROMPTS), len(heldout), len(training)) == (835, 38, 797)
    assert set(heldout).isdisjoint(training) and set(heldout) | set(training) == set(PROMPTS)
    assert all(prompt_sum(p) <= MAX_SUM for p in PROMPTS) and len(set(PROMPTS)) == len(PROMPTS)
    # Held out: every prompt of the hardest sums (no training derivation has their result), two of every other sum.
    assert {p for p in PROMPTS if prompt_sum(p) in HARDEST_SUMS} == {"000:", "001:", "010:", "100:"} <= set(heldout)
    assert Counter(prompt_sum(p) for p in heldout) == {0: 1, 1: 3, **dict.fromkeys(range(2, MAX_SUM + 1), 2)}
    assert {prompt_sum(p) for p in training} == set(range(2, MAX_SUM + 1))
    # Graded difficulty, one to ten correct answers; at least four for most prompts (26 of 38, 612 of 797).
    assert sorted({len(correct_answers(p)) for p in heldout}) == list(range(1, 11))
    assert sum(len(correct_answers(p)) >= 4 for p in heldout) == 26
    assert sum(len(correct_answers(p)) >= 4 for p in training) == 612


@PROPERTY_SETTINGS
@given(
    st.lists(st.sampled_from(training_prompts()), min_size=1, max_size=4, unique=True),
    st.integers(1, 20),
    st.floats(0.0, 0.9),
    st.integers(0, 2**16),
)
def test_every_corpus_example_marked_correct_has_an_exact_derivation(
    chosen: list[str], per_prompt: int, wrong_fraction: float, seed: int
) -> None:
    corpus = sample_corpus(tuple(chosen), per_prompt, wrong_fraction, 1.0, seed)
    assert [p for p, _ in corpus] == [p for p in chosen for _ in range(per_prompt)]
    for prompt, text in corpus:
        verdict = grade(prompt, text)
        assert len(text) == COMPLETION_CHARACTERS
        if verdict.correct:
            assert verdict.derivation_exact
        if not verdict.derivation_exact:  # a slip: the sum off by one to three, an answer that fits the wrong sum
            first, answer = text.split("\n")
            assert first[:-2] == derivation(prompt)[:-2] and 1 <= abs(int(first[-2:]) - prompt_sum(prompt)) <= 3
            assert int(answer[0]) + int(answer[1]) == int(first[-2:])


def test_the_corpus_skews_towards_one_correct_answer_and_mixes_in_wrong_ones() -> None:
    corpus = sample_corpus(("450:",), per_prompt=4000, wrong_fraction=0.3, zipf_exponent=1.0, seed=0)
    verdicts = Counter(grade(p, text) for p, text in corpus)
    assert (verdicts[(True, True)] + verdicts[(True, False)] + verdicts[(False, False)]) == 4000
    assert verdicts[(True, True)] / 4000 == pytest.approx(0.7, abs=0.03)
    assert verdicts[(True, False)] / 4000 == pytest.approx(0.15, abs=0.02)  # the right derivation, a wrong answer
    assert verdicts[(False, False)] / 4000 == pytest.approx(0.15, abs=0.02)  # a slip in the derivation
    ranked = sorted(Counter(text for p, text in corpus if is_correct(p, text)).values(), reverse=True)
    # Zipf over the ten answers of a sum of 9: the favourite has 1 / H_10 = 34% of the correct ones, the tenth 3.4%.
    assert len(ranked) == 10
    assert ranked[0] / sum(ranked) == pytest.approx(0.341, abs=0.03)
    assert ranked[-1] / sum(ranked) == pytest.approx(0.034, abs=0.015)
    assert sample_corpus(("450:",), 50, 0.3, 1.0, seed=1) == sample_corpus(("450:",), 50, 0.3, 1.0, seed=1)
    with pytest.raises(ValueError, match=r"wrong_fraction=1\.0 is invalid"):
        sample_corpus(("450:",), 1, 1.0, 1.0, seed=0)
