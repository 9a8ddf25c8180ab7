"""Pass@k group weights and the positive scale: hand-computed values, the weight as a probability over subsets."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from maxent_grpo.objective.advantage_shaping import pass_at_k_group_weights, scale_positive


def t(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def all_valid(rewards: torch.Tensor) -> torch.Tensor:
    return torch.ones_like(rewards, dtype=torch.bool)


def test_pass_at_k_weights_by_hand() -> None:
    # k = 4, n = 8: one success of 8 -> C(7, 3) / C(7, 3) = 1; two -> C(6, 3) / C(7, 3) = 20 / 35; five ->
    # C(3, 3) / C(7, 3) = 1 / 35; six or more -> 0 (any 3 others hold a success). Renormalised to mean 1 over the four
    # groups with a spread.
    rewards = t(
        [[1, 0, 0, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1, 0, 0]]
    )
    raw = [1.0, 20 / 35, 1 / 35, 0.0]
    mean = sum(raw) / 4
    weights = pass_at_k_group_weights(rewards, all_valid(rewards), 4)
    torch.testing.assert_close(weights, t([[w / mean for w in raw]])[0], atol=1e-12, rtol=0)


def test_groups_without_a_spread_get_weight_zero_and_do_not_count_in_the_mean() -> None:
    rewards = t([[1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0], [2, 1, 1, 0]])
    weights = pass_at_k_group_weights(rewards, all_valid(rewards), 2)
    # Group 0: C(3, 1) / C(3, 1) = 1; group 3 (best 2, reached once): 1 as well.
    torch.testing.assert_close(weights, t([[1.0, 0.0, 0.0, 1.0]])[0], atol=0, rtol=0)


def test_k_one_leaves_every_group_with_a_spread_at_one() -> None:
    rewards = t([[1, 1, 1, 0], [0.5, 0.2, 0.2, 0.2], [3, 3, 3, 3]])
    weights = pass_at_k_group_weights(rewards, all_valid(rewards), 1)
    torch.testing.assert_close(weights, t([[1.0, 1.0, 0.0]])[0], atol=0, rtol=0)


def test_only_valid_candidates_count_and_a_short_group_uses_its_size() -> None:
    # Group 0: valid rewards [1, 0, 0] (n = 3 < k = 4, so k = 3): C(2, 2) / C(2, 2) = 1.
    # Group 1: valid [1, 1, 0, 0]: C(2, 3) = 0 with k = 4... n = 4 -> C(2, 3) / C(3, 3) = 0.
    rewards = t([[1, 0, 0, 1], [1, 1, 0, 0]])
    valid = torch.tensor([[True, True, True, False], [True, True, True, True]])
    weights = pass_at_k_group_weights(rewards, valid, 4)
    torch.testing.assert_close(weights, t([[2.0, 0.0]])[0], atol=0, rtol=0)


def test_when_no_group_can_raise_pass_at_k_every_weight_is_zero() -> None:
    rewards = t([[1, 1, 1, 0], [0, 1, 1, 1]])
    weights = pass_at_k_group_weights(rewards, all_valid(rewards), 3)
    assert weights.tolist() == [0.0, 0.0]


def _groups(n: int) -> st.SearchStrategy[tuple[int, int, int]]:
    """(n, c, k): a group of n with 1 <= c < n successes, and 1 <= k <= n."""
    return st.tuples(st.just(n), st.integers(min_value=1, max_value=n - 1), st.integers(min_value=1, max_value=n))


@given(st.integers(min_value=2, max_value=7).flatmap(_groups))
def test_the_weight_is_the_chance_that_a_success_is_alone_among_k_samples(case: tuple[int, int, int]) -> None:
    n, c, k = case
    # Enumerate every k-subset of the group that holds success 0: the share in which it is the only success.
    others = range(1, n)
    subsets = list(itertools.combinations(others, k - 1))
    alone = sum(all(i >= c for i in subset) for subset in subsets) / len(subsets)
    rewards = t([[1.0] * c + [0.0] * (n - c), [1.0] + [0.0] * (n - 1)])
    weights = pass_at_k_group_weights(rewards, all_valid(rewards), k)
    # The second group (one success) has raw weight 1, so the ratio of the two is the first group's raw weight.
    assert math.isclose(weights[0].item() / weights[1].item(), alone, rel_tol=1e-12, abs_tol=1e-12)


def test_integer_rewards_give_float32_weights() -> None:
    assert pass_at_k_group_weights(torch.tensor([[1, 0]]), torch.ones(1, 2, dtype=torch.bool), 2).dtype == (
        torch.float32
    )


@pytest.mark.parametrize(
    ("rewards", "valid", "k", "name"),
    [
        (torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool), 0, "k"),
        (torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool), 4, "k"),
        (torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool), 1.5, "k"),
        (torch.zeros(2, 3), torch.ones(2, 3), 2, r"valid\.dtype"),
        (torch.zeros(2, 3), torch.ones(3, 2, dtype=torch.bool), 2, "rewards/valid shapes"),
    ],
)
def test_invalid_arguments_name_the_argument(rewards, valid, k, name) -> None:
    with pytest.raises(ValueError, match=rf"^{name}="):
        pass_at_k_group_weights(rewards, valid, k)


def test_scale_positive_scales_only_positive_advantages() -> None:
    advantages = t([[3.0, -1.0, -1.0, -1.0], [0.0, 0.0, 0.5, -0.5]])
    torch.testing.assert_close(
        scale_positive(advantages, 0.1), t([[0.3, -1.0, -1.0, -1.0], [0.0, 0.0, 0.05, -0.5]]), atol=1e-15, rtol=0
    )
    assert scale_positive(advantages, 1.0) is advantages


@pytest.mark.parametrize("scale", [0.0, -1.0, math.inf, math.nan])
def test_scale_positive_refuses_a_scale_that_is_not_above_zero(scale: float) -> None:
    with pytest.raises(ValueError, match=r"^scale="):
        scale_positive(torch.zeros(1, 2), scale)
