"""The single-prompt answer tasks: their rewards and the figures of sampled answers."""

from __future__ import annotations

import math

import pytest

from maxent_grpo_experiments.answer_tasks import DIGITS, FOUR, TASKS, VOWEL


def test_rewards_read_each_task_answer() -> None:
    assert VOWEL.reward(["a!", " e", "xa", "", [{"role": "assistant", "content": "u"}]]) == [1, 1, 0, 0, 1]
    assert DIGITS.reward(["19", " 55", "91 ", "10", "5", "555"]) == [1, 1, 1, 0, 0, 0]
    assert FOUR.reward(["1", " 4", "5", "", "12"]) == [1, 1, 0, 0, 0]
    assert list(TASKS) == ["vowel", "four", "digits"]


def test_tasks_train_at_the_config_defaults() -> None:
    for task in TASKS.values():
        assert dict(task.task.maxent_settings) == {}
    assert FOUR.task.max_completion_length == 1 and FOUR.task.mode_key == "first_token"
    assert DIGITS.task.mode_key == "last_line" and len(DIGITS.correct) == 9


def test_evaluate_counts_correct_answers_and_their_entropy() -> None:
    figures = FOUR.evaluate(["1", "1", "2", "x", " 3"])
    assert figures["mean_reward"] == pytest.approx(0.8)
    assert figures["distinct_correct"] == 3
    assert figures["answer_counts"] == {"1": 2, "2": 1, "3": 1, "4": 0}
    expected = (0.5 * math.log(2) + 2 * 0.25 * math.log(4)) / math.log(4)
    assert figures["normalized_entropy"] == pytest.approx(expected)
    assert FOUR.evaluate(list("1234"))["normalized_entropy"] == pytest.approx(1.0)
    assert VOWEL.evaluate(["a", "a"])["normalized_entropy"] == 0.0
    nothing = DIGITS.evaluate(["00", "="])
    assert (nothing["mean_reward"], nothing["normalized_entropy"], nothing["distinct_correct"]) == (0.0, 0.0, 0)


def test_evaluate_refuses_no_answers() -> None:
    with pytest.raises(ValueError, match="at least one answer"):
        VOWEL.evaluate([])
