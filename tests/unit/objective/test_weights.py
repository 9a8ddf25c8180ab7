"""Listwise MaxEnt weights and advantages: hand-computed values, limits and properties over random groups."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from maxent_grpo.objective.weights import compute_listwise, weight_entropy

E = math.e


def t(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def listwise_weights(rewards: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    return compute_listwise(rewards, **kwargs).weights


def listwise_advantages(rewards: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    return compute_listwise(rewards, **kwargs).advantages


def close(actual: torch.Tensor, expected: list[list[float]] | list[float], atol: float = 1e-12) -> None:
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


# --- candidate form: hand-computed values ---------------------------------------------------------------------------


def test_tau_one_is_the_reward_softmax() -> None:
    # eps = 0, tau = 1: w = q = softmax(r) = [e, 1] / (e + 1); A = 2 w - 1.
    result = compute_listwise(t([[1.0, 0.0]]), tau=1.0, q_temperature=1.0, q_epsilon=0.0)
    close(result.weights, [[E / (E + 1), 1 / (E + 1)]])
    close(result.advantages, [[(E - 1) / (E + 1), (1 - E) / (E + 1)]])
    close(result.entropy, [math.log(E + 1) - E / (E + 1)])


def test_tau_half_sharpens() -> None:
    # w ∝ q^(1/tau) = q^2 = [e^2, 1].
    weights = listwise_weights(t([[1.0, 0.0]]), tau=0.5, q_temperature=1.0, q_epsilon=0.0)
    close(weights, [[E**2 / (E**2 + 1), 1 / (E**2 + 1)]])


def test_q_temperature_and_epsilon_smoothing() -> None:
    # softmax([2, 0, 0] / 2) = [e, 1, 1] / (e + 2); q = 0.7 * softmax + 0.3 / 3; tau = 1 so w = q.
    weights = listwise_weights(t([[2.0, 0.0, 0.0]]), tau=1.0, q_temperature=2.0, q_epsilon=0.3)
    top, rest = 0.7 * E / (E + 2) + 0.1, 0.7 / (E + 2) + 0.1
    close(weights, [[top, rest, rest]])


def test_reference_prior_with_beta() -> None:
    # Equal rewards: q = [1/2, 1/2]; w ∝ exp((log 1/2 + l) / (tau + beta)) with l = [0, -2], tau = beta = 1: [1, 1/e].
    weights = listwise_weights(
        t([[0.0, 0.0]]), tau=1.0, q_temperature=1.0, q_epsilon=0.0, beta=1.0, ref_term=t([[0.0, -2.0]])
    )
    close(weights, [[E / (E + 1), 1 / (E + 1)]])


def test_ref_term_is_ignored_when_beta_is_zero() -> None:
    rewards = t([[1.0, 0.0, 2.0]])
    plain = listwise_weights(rewards, tau=1.0, q_temperature=1.0, q_epsilon=0.1)
    with_ref = listwise_weights(
        rewards, tau=1.0, q_temperature=1.0, q_epsilon=0.1, ref_term=t([[float("nan"), -5.0, 3.0]])
    )
    torch.testing.assert_close(with_ref, plain, atol=0, rtol=0)


@pytest.mark.parametrize("tau", [0.0, 1e-8, 1e-300])
def test_tau_to_zero_puts_all_weight_on_the_best_rewards(tau: float) -> None:
    result = compute_listwise(
        t([[1.0, 3.0, 3.0, -2.0], [5.0, 1.0, 0.0, 0.0]]), tau=tau, q_temperature=1.0, q_epsilon=0.1
    )
    close(result.weights, [[0.0, 0.5, 0.5, 0.0], [1.0, 0.0, 0.0, 0.0]])
    close(result.advantages, [[-1.0, 1.0, 1.0, -1.0], [3.0, -1.0, -1.0, -1.0]])
    close(result.entropy, [math.log(2), 0.0])


@pytest.mark.parametrize("tau", [math.inf, 1e16])
def test_tau_to_infinity_gives_zero_advantages(tau: float) -> None:
    result = compute_listwise(t([[1.0, 3.0, -2.0], [1e6, -1e6, 0.0]]), tau=tau, q_temperature=1.0, q_epsilon=0.0)
    close(result.weights, [[1 / 3] * 3] * 2, atol=1e-9)
    close(result.advantages, [[0.0] * 3] * 2, atol=1e-9)
    close(result.entropy, [math.log(3)] * 2, atol=1e-9)


@pytest.mark.parametrize("tau", [0.0, 0.01, 1.0, 100.0])
@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_equal_rewards_give_zero_advantages(tau: float, beta: float) -> None:
    rewards = t([[0.7] * 5, [-1e6] * 5])
    ref = t([[-1.3] * 5, [0.0] * 5])
    result = compute_listwise(rewards, tau=tau, q_temperature=1.0, q_epsilon=0.2, beta=beta, ref_term=ref)
    close(result.weights, [[0.2] * 5] * 2)
    close(result.advantages, [[0.0] * 5] * 2)


def test_advantages_match_weights() -> None:
    rewards = t([[0.3, -1.0, 2.0, 2.0]])
    kwargs = {"tau": 0.7, "q_temperature": 0.5, "q_epsilon": 0.05}
    torch.testing.assert_close(
        listwise_advantages(rewards, **kwargs), 4 * listwise_weights(rewards, **kwargs) - 1, atol=1e-12, rtol=0
    )


# --- validity mask ---------------------------------------------------------------------------------------------------


def test_invalid_and_non_finite_rewards_are_excluded() -> None:
    # Row 0: the NaN and the masked 5.0 drop out, leaving the [1, 0] group of the first test (G_v = 2).
    # Row 1: no valid candidate at all.
    rewards = t([[1.0, float("nan"), 0.0, 5.0], [1.0, 2.0, 3.0, 4.0]])
    valid = torch.tensor([[True, True, True, False], [False] * 4])
    result = compute_listwise(rewards, tau=1.0, q_temperature=1.0, q_epsilon=0.0, valid=valid)
    close(result.weights, [[E / (E + 1), 0.0, 1 / (E + 1), 0.0], [0.0] * 4])
    close(result.advantages, [[(E - 1) / (E + 1), 0.0, (1 - E) / (E + 1), 0.0], [0.0] * 4])
    close(result.entropy, [math.log(E + 1) - E / (E + 1), 0.0])


def test_epsilon_smoothing_counts_valid_candidates_only() -> None:
    # G_v = 2: q = 0.5 * [e, 1] / (e + 1) + 0.5 / 2.
    valid = torch.tensor([[True, False, True]])
    weights = listwise_weights(t([[1.0, 9.0, 0.0]]), tau=1.0, q_temperature=1.0, q_epsilon=0.5, valid=valid)
    close(weights, [[0.5 * E / (E + 1) + 0.25, 0.0, 0.5 / (E + 1) + 0.25]])


def test_non_finite_reference_term_is_invalid_when_beta_is_positive() -> None:
    result = compute_listwise(
        t([[0.0, 4.0, 0.0]]),
        tau=1.0,
        q_temperature=1.0,
        q_epsilon=0.0,
        beta=1.0,
        ref_term=t([[0.0, float("-inf"), -2.0]]),
    )
    close(result.weights, [[E / (E + 1), 0.0, 1 / (E + 1)]])
    close(result.advantages, [[2 * E / (E + 1) - 1, 0.0, 2 / (E + 1) - 1]])


# --- mode form -------------------------------------------------------------------------------------------------------


def test_rare_correct_mode_weighs_as_much_as_a_frequent_one() -> None:
    # 12 candidates: answer "a" (correct) 10 times, "b" (correct) once, "c" (wrong) once. tau = 1, eps = 0:
    # W = softmax([1, 1, 0]) = [e, e, 1] / (2e + 1); each "a" gets W_a / 10.
    rewards = t([[1.0] * 11 + [0.0]])
    mode_ids = torch.tensor([[0] * 10 + [1, 2]])
    result = compute_listwise(rewards, tau=1.0, q_temperature=1.0, q_epsilon=0.0, mode_ids=mode_ids)
    z = 2 * E + 1
    close(result.weights, [[E / (10 * z)] * 10 + [E / z, 1 / z]])
    close(result.advantages, [[12 * E / (10 * z) - 1] * 10 + [12 * E / z - 1, 12 / z - 1]])
    assert result.weights[0, :10].sum().item() == pytest.approx(result.weights[0, 10].item(), abs=1e-12)
    close(result.entropy, [math.log(z) - 2 * E / z])


def test_mode_form_uses_mean_rewards_and_the_number_of_modes() -> None:
    # Modes [0, 1, 0, 1]: mean rewards [0.5, 2]; M = 2 so q = 0.5 * softmax([0.5, 2]) + 0.5 / 2; tau = 1: W = q.
    rewards = t([[1.0, 3.0, 0.0, 1.0]])
    result = compute_listwise(
        rewards, tau=1.0, q_temperature=1.0, q_epsilon=0.5, mode_ids=torch.tensor([[0, 1, 0, 1]])
    )
    soft_low = math.exp(0.5) / (math.exp(0.5) + math.exp(2.0))
    w_low, w_high = 0.5 * soft_low + 0.25, 0.5 * (1 - soft_low) + 0.25
    close(result.weights, [[w_low / 2, w_high / 2, w_low / 2, w_high / 2]])
    close(result.entropy, [-(w_low * math.log(w_low) + w_high * math.log(w_high))])


def test_mode_form_uses_mean_reference_term() -> None:
    # Equal rewards; mode 0 = candidates 0, 1 with l = [0, -2] (mean -1), mode 1 = candidate 2 with l = 0.
    # tau = beta = 1: W ∝ exp(l_bar / 2) = [e^-0.5, 1].
    result = compute_listwise(
        t([[0.0, 0.0, 0.0]]),
        tau=1.0,
        q_temperature=1.0,
        q_epsilon=0.0,
        beta=1.0,
        ref_term=t([[0.0, -2.0, 0.0]]),
        mode_ids=torch.tensor([[0, 0, 1]]),
    )
    w0 = math.exp(-0.5) / (math.exp(-0.5) + 1)
    close(result.weights, [[w0 / 2, w0 / 2, 1 - w0]])


def test_mode_form_with_invalid_candidates_and_empty_groups() -> None:
    # Row 0: candidate 1 invalid, so mode 0 = {0, 2} (mean reward 1) and mode 1 = {3} (reward 0): tau = 0 picks mode 0.
    rewards = t([[1.0, 7.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    valid = torch.tensor([[True, False, True, True], [False] * 4])
    mode_ids = torch.tensor([[0, 0, 0, 1], [0, 1, 2, 3]])
    result = compute_listwise(rewards, tau=0.0, q_temperature=1.0, q_epsilon=0.0, mode_ids=mode_ids, valid=valid)
    close(result.weights, [[0.5, 0.0, 0.5, 0.0], [0.0] * 4])
    close(result.advantages, [[0.5, 0.0, 0.5, -1.0], [0.0] * 4])
    close(result.entropy, [0.0, 0.0])


def test_singleton_modes_reproduce_the_candidate_form() -> None:
    generator = torch.Generator().manual_seed(0)
    rewards = torch.randn(3, 6, generator=generator, dtype=torch.float64)
    ref = torch.randn(3, 6, generator=generator, dtype=torch.float64)
    valid = torch.rand(3, 6, generator=generator) > 0.3
    kwargs = {"tau": 0.4, "q_temperature": 0.8, "q_epsilon": 0.1, "beta": 0.3, "ref_term": ref, "valid": valid}
    candidate = compute_listwise(rewards, **kwargs)
    for mode_ids in (
        torch.arange(6).expand(3, 6),
        torch.stack([torch.randperm(6, generator=generator) for _ in range(3)]),
    ):
        modes = compute_listwise(rewards, mode_ids=mode_ids, **kwargs)
        torch.testing.assert_close(modes.weights, candidate.weights, atol=1e-12, rtol=0)
        torch.testing.assert_close(modes.advantages, candidate.advantages, atol=1e-12, rtol=0)
        torch.testing.assert_close(modes.entropy, candidate.entropy, atol=1e-12, rtol=0)


def test_policy_probabilities_pull_a_rare_sampled_mode_up() -> None:
    # tau = 0, modes: "a" 10 times (p = 0.9), "b" once (p = 0.003), "c" wrong once (p = 0.001).
    # (5): W ∝ [0.5 * 10 / 0.9, 0.5 * 1 / 0.003, 0] (the count estimate would give [0.5, 0.5, 0]).
    rewards = t([[1.0] * 11 + [0.0]])
    mode_ids = torch.tensor([[0] * 10 + [1, 2]])
    mode_log_prob = t([[math.log(0.9)] * 10 + [math.log(0.003), math.log(0.001)]])
    result = compute_listwise(
        rewards, tau=0.0, q_temperature=1.0, q_epsilon=0.0, mode_ids=mode_ids, mode_log_prob=mode_log_prob
    )
    w_a, w_b = 10 / 0.9, 1 / 0.003
    z = w_a + w_b
    close(result.weights, [[w_a / z / 10] * 10 + [w_b / z, 0.0]])
    close(result.advantages, [[12 * w_a / z / 10 - 1] * 10 + [12 * w_b / z - 1, -1.0]])
    close(result.entropy, [math.log(2)])  # of the target (1)-(2): uniform over the two correct modes


def test_policy_correction_is_clipped() -> None:
    # The rare mode of the test above: its factor (1 / 12) / 0.003 = 27.8 clipped at 8; the common one's is
    # (10 / 12) / 0.9.
    rewards = t([[1.0] * 11 + [0.0]])
    mode_ids = torch.tensor([[0] * 10 + [1, 2]])
    mode_log_prob = t([[math.log(0.9)] * 10 + [math.log(0.003), math.log(0.001)]])
    result = compute_listwise(
        rewards,
        tau=0.0,
        q_temperature=1.0,
        q_epsilon=0.0,
        mode_ids=mode_ids,
        mode_log_prob=mode_log_prob,
        correction_clip=8.0,
    )
    w_a, w_b = (10 / 12) / 0.9, 8.0
    z = w_a + w_b
    close(result.weights, [[w_a / z / 10] * 10 + [w_b / z, 0.0]])


def test_policy_probabilities_with_tau_weigh_every_mode() -> None:
    # tau = 1, T_q = 1: W^(1-2) = softmax([1, 0]) over modes {0, 1}; (5) multiplies by (n_m / G_v) / p_m =
    # [(2 / 3) / 0.5, (1 / 3) / 0.01], unclipped, then truncated at 8.
    kwargs = {
        "tau": 1.0,
        "q_temperature": 1.0,
        "q_epsilon": 0.0,
        "mode_ids": torch.tensor([[0, 0, 1]]),
        "mode_log_prob": t([[math.log(0.5), math.log(0.5), math.log(0.01)]]),
    }
    for clip, factors in ((math.inf, (4 / 3, 100 / 3)), (8.0, (4 / 3, 8.0))):
        result = compute_listwise(t([[1.0, 1.0, 0.0]]), correction_clip=clip, **kwargs)
        w0, w1 = E / (E + 1) * factors[0], 1 / (E + 1) * factors[1]
        close(result.weights, [[w0 / (w0 + w1) / 2] * 2 + [w1 / (w0 + w1)]])


def test_the_truncation_bounds_what_a_rare_wrong_answer_draws_while_tau_gives_it_weight() -> None:
    # A wrong answer sampled once with policy probability e^-14 (a group holds one of its many completions): its
    # factor (1 / 4) / e^-14 takes nearly all of the target at tau = 0.25; truncated at G = 4 it gets 4 times its
    # count weight.
    rewards = t([[1.0, 1.0, 1.0, 0.0]])
    kwargs = {
        "tau": 0.25,
        "q_temperature": 1.0,
        "q_epsilon": 0.0,
        "mode_ids": torch.tensor([[0, 0, 0, 1]]),
        "mode_log_prob": t([[math.log(0.75)] * 3 + [-14.0]]),
    }
    assert compute_listwise(rewards, **kwargs).weights[0, 3] > 0.99
    truncated = compute_listwise(rewards, correction_clip=4.0, **kwargs).weights
    right, wrong = E**4, 1.0  # the count weights of (1)-(2) at tau = 0.25: q^(1/tau) = [e, 1]^4
    close(truncated, [[right / (right + 4 * wrong) / 3] * 3 + [4 * wrong / (right + 4 * wrong)]])


def test_policy_correction_is_taken_in_log_space() -> None:
    # tau = 1/800: the wrong mode's target weight is e^-800 (0 as a float64), but the group sampled the right one
    # with probability 1 and the wrong one with e^-5000, so (5) gives the wrong mode nearly all of the weight.
    result = compute_listwise(
        t([[1.0, 0.0]]),
        tau=1 / 800,
        q_temperature=1.0,
        q_epsilon=0.0,
        mode_ids=torch.tensor([[0, 1]]),
        mode_log_prob=t([[0.0, -5000.0]]),
    )
    close(result.weights, [[0.0, 1.0]])


def test_a_truncated_correction_of_two_best_modes() -> None:
    # Two correct modes sampled with probabilities 1 and e^-5000 (a factor of e^5000 / 2, which no float64 holds):
    # the rare one takes all of the weight without truncation, 8 / (8 + 1/2) of it truncated at 8.
    rewards, mode_ids, mode_log_prob = t([[1.0, 1.0]]), torch.tensor([[0, 1]]), t([[0.0, -5000.0]])
    kwargs = {"tau": 0.0, "q_temperature": 1.0, "q_epsilon": 0.0, "mode_ids": mode_ids, "mode_log_prob": mode_log_prob}
    close(compute_listwise(rewards, **kwargs).weights, [[0.0, 1.0]])
    close(compute_listwise(rewards, correction_clip=8.0, **kwargs).weights, [[0.5 / 8.5, 8.0 / 8.5]])


def test_mode_log_prob_mean_does_not_overflow() -> None:
    # Two candidates of mode 0 at -1e308 each: their sum would overflow to -inf, their mean does not.
    result = compute_listwise(
        t([[1.0, 1.0, 1.0]]),
        tau=0.0,
        q_temperature=1.0,
        q_epsilon=0.0,
        mode_ids=torch.tensor([[0, 0, 1]]),
        mode_log_prob=t([[-1e308, -1e308, -1.0]]),
    )
    assert torch.isfinite(result.advantages).all()
    close(result.weights, [[0.5, 0.5, 0.0]])


def test_non_finite_mode_log_prob_is_invalid() -> None:
    result = compute_listwise(
        t([[1.0, 1.0, 0.0, 1.0]]),
        tau=0.0,
        q_temperature=1.0,
        q_epsilon=0.0,
        mode_ids=torch.tensor([[0, 0, 1, 2]]),
        mode_log_prob=t([[-1.0, -1.0, -2.0, -math.inf]]),
    )
    close(result.weights, [[0.5, 0.5, 0.0, 0.0]])
    close(result.advantages, [[0.5, 0.5, -1.0, 0.0]])


# --- entropy, dtypes, validation -------------------------------------------------------------------------------------


def test_weight_entropy() -> None:
    weights = t([[0.5, 0.5, 0.0], [0.25, 0.25, 0.5]])
    close(weight_entropy(weights), [math.log(2), 1.5 * math.log(2)])
    valid = torch.tensor([[True, True, True], [True, True, False]])
    close(weight_entropy(weights, valid), [math.log(2), 0.5 * math.log(4)])


def test_output_dtype_and_frozen_targets() -> None:
    assert compute_listwise(torch.tensor([[1, 0]]), tau=1.0, q_temperature=1.0, q_epsilon=0.0).weights.dtype == (
        torch.float32
    )
    rewards = torch.tensor([[1.0, 0.0]], dtype=torch.float32, requires_grad=True)
    result = compute_listwise(rewards, tau=1.0, q_temperature=1.0, q_epsilon=0.0)
    assert result.advantages.dtype == torch.float32
    assert not result.advantages.requires_grad


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"tau": -1.0}, "tau"),
        ({"tau": float("nan")}, "tau"),
        ({"q_temperature": 0.0}, "q_temperature"),
        ({"q_epsilon": 1.0}, "q_epsilon"),
        ({"beta": -0.1}, "beta"),
        ({"beta": 0.5}, "ref_term"),
        ({"ref_term": torch.zeros(2, 2), "beta": 0.5}, r"ref_term\.shape"),
        ({"valid": torch.ones(2, 3)}, r"valid\.dtype"),
        ({"mode_ids": torch.tensor([[0, 1, 3], [0, 0, 0]])}, "mode_ids"),
        ({"mode_ids": torch.zeros(2, 3)}, r"mode_ids\.dtype"),
        ({"rewards": torch.zeros(3)}, "rewards"),
        ({"mode_log_prob": torch.zeros(2, 3)}, "mode_log_prob"),
        ({"correction_clip": 0.5}, "correction_clip"),
        ({"correction_clip": float("nan")}, "correction_clip"),
        (
            {"mode_ids": torch.zeros(2, 3, dtype=torch.long), "mode_log_prob": torch.zeros(3, 2)},
            r"mode_log_prob\.shape",
        ),
    ],
)
def test_invalid_arguments_name_the_argument(kwargs: dict[str, object], name: str) -> None:
    arguments: dict[str, object] = {
        "rewards": torch.zeros(2, 3),
        "tau": 1.0,
        "q_temperature": 1.0,
        "q_epsilon": 0.0,
        **kwargs,
    }
    with pytest.raises(ValueError, match=rf"^{name}="):
        compute_listwise(**arguments)  # type: ignore[arg-type]


# --- properties ------------------------------------------------------------------------------------------------------

reward_values = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


@st.composite
def listwise_cases(draw: st.DrawFn, with_modes: bool = False) -> dict[str, object]:
    num_groups = draw(st.integers(1, 4))
    group_size = draw(st.integers(1, 8))

    def row(elements: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
        return st.lists(elements, min_size=group_size, max_size=group_size)

    def table(elements: st.SearchStrategy[Any]) -> st.SearchStrategy[list[list[Any]]]:
        return st.lists(row(elements), min_size=num_groups, max_size=num_groups)

    # Each group is either all-equal or free.
    rows = [
        [draw(reward_values)] * group_size if draw(st.booleans()) else draw(row(reward_values))
        for _ in range(num_groups)
    ]
    valid = draw(st.none() | table(st.booleans()))
    mode_table = table(st.integers(0, group_size - 1))
    mode_ids = draw(mode_table if with_modes else st.none() | mode_table)
    beta = draw(st.sampled_from([0.0, 0.1, 2.0]))
    ref_rows = draw(table(st.floats(-50.0, 0.0)))
    # The policy's mode log-probabilities (per candidate; a mode's candidates need not agree: the mean is used).
    log_prob_rows = draw(st.none() | table(st.floats(-700.0, 0.0))) if mode_ids is not None else None
    return {
        "rewards": t(rows),
        "tau": draw(st.sampled_from([0.0, 1e-6, 0.1, 1.0, 30.0, math.inf])),
        "q_temperature": draw(st.sampled_from([1e-3, 0.5, 1.0, 1e3])),
        "q_epsilon": draw(st.sampled_from([0.0, 0.05, 0.5, 0.99])),
        "beta": beta,
        "ref_term": t(ref_rows) if beta > 0 else None,
        "valid": None if valid is None else torch.tensor(valid, dtype=torch.bool),
        "mode_ids": None if mode_ids is None else torch.tensor(mode_ids, dtype=torch.long),
        "mode_log_prob": None if log_prob_rows is None else t(log_prob_rows),
    }


@settings(max_examples=100, deadline=None)
@given(listwise_cases())
def test_weights_and_advantages_are_finite_normalised_and_zero_mean(case: dict[str, object]) -> None:
    result = compute_listwise(**case)  # type: ignore[arg-type]
    rewards = case["rewards"]
    assert isinstance(rewards, torch.Tensor)
    valid = case["valid"] if case["valid"] is not None else torch.ones_like(rewards, dtype=torch.bool)
    assert isinstance(valid, torch.Tensor)
    for tensor in (result.weights, result.advantages, result.entropy):
        assert torch.isfinite(tensor).all()
    assert (result.weights >= 0).all()
    assert (result.weights[~valid] == 0).all() and (result.advantages[~valid] == 0).all()
    has_valid = valid.any(dim=-1)
    sums = result.weights.sum(dim=-1)
    torch.testing.assert_close(sums[has_valid], torch.ones_like(sums[has_valid]), atol=1e-9, rtol=0)
    assert (sums[~has_valid] == 0).all()
    mean_advantage = result.advantages.sum(dim=-1) / valid.sum(dim=-1).clamp_min(1)
    torch.testing.assert_close(mean_advantage, torch.zeros_like(mean_advantage), atol=1e-9, rtol=0)
    max_entropy = torch.log(valid.sum(dim=-1).clamp_min(1).to(torch.float64))
    assert (result.entropy >= -1e-12).all() and (result.entropy <= max_entropy + 1e-9).all()


@settings(max_examples=50, deadline=None)
@given(listwise_cases(with_modes=True))
def test_candidates_of_one_mode_share_its_weight_equally(case: dict[str, object]) -> None:
    mode_ids = case["mode_ids"]
    assert isinstance(mode_ids, torch.Tensor)
    result = compute_listwise(**case)  # type: ignore[arg-type]
    valid = case["valid"] if case["valid"] is not None else torch.ones_like(mode_ids, dtype=torch.bool)
    assert isinstance(valid, torch.Tensor)
    same_mode = (mode_ids.unsqueeze(-1) == mode_ids.unsqueeze(-2)) & valid.unsqueeze(-1) & valid.unsqueeze(-2)
    difference = (result.weights.unsqueeze(-1) - result.weights.unsqueeze(-2)).abs()
    assert (difference[same_mode] <= 1e-12).all()


def _count_log_prob(mode_ids: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """log(n_m / G_v) per candidate: the count estimate, with which (5) is (4)."""
    usable = torch.ones_like(mode_ids, dtype=torch.bool) if valid is None else valid
    same = (mode_ids.unsqueeze(-1) == mode_ids.unsqueeze(-2)) & usable.unsqueeze(-2)
    counts = same.sum(-1).clamp_min(1).double()
    return torch.log(counts / usable.sum(-1, keepdim=True).clamp_min(1).double())


@settings(max_examples=50, deadline=None)
@given(listwise_cases(with_modes=True))
def test_count_probabilities_give_back_the_mode_form(case: dict[str, object]) -> None:
    mode_ids, valid = case["mode_ids"], case["valid"]
    assert isinstance(mode_ids, torch.Tensor)
    assert valid is None or isinstance(valid, torch.Tensor)
    plain = compute_listwise(**{**case, "mode_log_prob": None})  # type: ignore[arg-type]
    counted = {**case, "mode_log_prob": _count_log_prob(mode_ids, valid)}
    corrected = compute_listwise(**counted)  # type: ignore[arg-type]
    torch.testing.assert_close(corrected.weights, plain.weights, atol=1e-9, rtol=0)
    torch.testing.assert_close(corrected.advantages, plain.advantages, atol=1e-8, rtol=0)
