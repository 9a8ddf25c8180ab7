"""The sampling policy's mode probability estimate: logsumexp over a mode's distinct sampled completions."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from maxent_grpo.objective.mode_probability import mode_log_probs


def test_a_completion_sampled_twice_counts_once() -> None:
    # Mode 0 holds completions x (twice) and y; mode 1 holds z. p(x) = 0.2, p(y) = 0.1, p(z) = 0.05.
    mode_ids = torch.tensor([[0, 0, 0, 1]])
    completions = [[(1, 2), (1, 3), (1, 2), (4,)]]
    log_probs = torch.tensor([[math.log(0.2), math.log(0.1), math.log(0.2), math.log(0.05)]])
    result = mode_log_probs(mode_ids, completions, log_probs, torch.ones(1, 4, dtype=torch.bool))
    expected = [[math.log(0.3)] * 3 + [math.log(0.05)]]
    torch.testing.assert_close(result, torch.tensor(expected, dtype=torch.float64), atol=1e-6, rtol=0)


def test_invalid_and_non_finite_candidates_neither_count_nor_get_an_estimate() -> None:
    mode_ids = torch.tensor([[0, 0, 0, 1], [0, 1, 2, 3]])
    completions = [[(1,), (2,), (3,), (4,)], [(1,), (2,), (3,), (4,)]]
    log_probs = torch.tensor([[-1.0, -2.0, math.nan, -1.0], [-1.0, -1.0, -1.0, -1.0]])
    valid = torch.tensor([[True, False, True, True], [False] * 4])
    result = mode_log_probs(mode_ids, completions, log_probs, valid)
    assert result[0, 0].item() == pytest.approx(-1.0)  # candidate 1 is invalid, candidate 2 has no probability
    assert result[0, 3].item() == pytest.approx(-1.0)
    assert [result[0, 1].item(), result[0, 2].item()] == [-math.inf, -math.inf]
    assert (result[1] == -math.inf).all()


def test_shapes_must_agree() -> None:
    ones = torch.ones(1, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match="one shape"):
        mode_log_probs(torch.zeros(1, 2, dtype=torch.long), [[(1,), (2,)]], torch.zeros(1, 3), ones)
    with pytest.raises(ValueError, match="completions must hold 1 groups of 2"):
        mode_log_probs(torch.zeros(1, 2, dtype=torch.long), [[(1,)]], torch.zeros(1, 2), ones)


@st.composite
def groups(draw: st.DrawFn) -> tuple[list[list[int]], list[list[int]], dict[int, float], list[list[bool]]]:
    num_groups, size = draw(st.integers(1, 3)), draw(st.integers(1, 8))
    # Each completion (an int) has one probability and belongs to one mode: mode = completion % 3.
    probability = {c: draw(st.floats(-30.0, 0.0)) for c in range(6)}
    completions = [[draw(st.integers(0, 5)) for _ in range(size)] for _ in range(num_groups)]
    modes = [[c % 3 for c in group] for group in completions]
    valid = [[draw(st.booleans()) for _ in range(size)] for _ in range(num_groups)]
    return completions, modes, probability, valid


@settings(max_examples=100, deadline=None)
@given(groups())
def test_matches_the_sum_over_distinct_valid_completions(
    case: tuple[list[list[int]], list[list[int]], dict[int, float], list[list[bool]]],
) -> None:
    completions, modes, probability, valid = case
    log_probs = torch.tensor([[probability[c] for c in group] for group in completions], dtype=torch.float64)
    result = mode_log_probs(
        torch.tensor(modes), [[(c,) for c in group] for group in completions], log_probs, torch.tensor(valid)
    )
    for g, (group, group_valid) in enumerate(zip(completions, valid, strict=True)):
        for i, (completion, ok) in enumerate(zip(group, group_valid, strict=True)):
            if not ok:
                assert result[g, i].item() == -math.inf
                continue
            distinct = {c for c, v in zip(group, group_valid, strict=True) if v and c % 3 == completion % 3}
            expected = math.log(sum(math.exp(probability[c]) for c in distinct))
            assert result[g, i].item() == pytest.approx(expected, abs=1e-9)
