"""A completion whose tool mask does not fit its ids is unusable (a missing slot), like one with wrong logprobs."""

from __future__ import annotations

from maxent_grpo import Completion
from maxent_grpo.training.generation.contract.completion_check import CompletionCheck


def test_tool_masks_must_match_the_completion():
    check = CompletionCheck(10)
    assert check(Completion("", [1], [2, 3], tool_mask=[1, 0])) is None
    assert check(Completion("", [1], [2, 3], tool_mask=[1])) == "tool_mask length differs from completion length"
    assert check(Completion("", [1], [2, 3], tool_mask=[1, 2])) == "tool_mask holds values other than 0 and 1"


def test_completion_ids_problem_is_the_check_applied_to_the_sampled_ids():
    check = CompletionCheck(10)
    assert check.completion_ids_problem([0, 9]) is None
    assert check.completion_ids_problem([]) == check(Completion("", [1], [])) == "empty completion"
    outside = "completion token id outside the vocabulary [0, 10)"
    assert check.completion_ids_problem([3, 10]) == check(Completion("", [1], [3, 10])) == outside
    assert check.completion_ids_problem([-1]) == outside
