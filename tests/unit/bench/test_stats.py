"""The A/B benchmark's statistics on synthetic inputs with known answers."""

from __future__ import annotations

import math

import pytest

from maxent_grpo.bench.metrics import TOKENS_PER_SECOND, mean_after_warmup, step_series
from maxent_grpo.bench.stats import (
    DIFFERS,
    WITHIN,
    regularized_incomplete_beta,
    student_t_cdf,
    summarize,
    t_quantile,
    welch_difference,
)

# Student t quantiles from standard tables (8 significant digits).
T_TABLE = [
    (0.975, 1, 12.706205),
    (0.975, 2, 4.3026527),
    (0.975, 3, 3.1824463),
    (0.975, 4, 2.7764451),
    (0.975, 10, 2.2281389),
    (0.975, 30, 2.0422725),
    (0.975, 1000, 1.9623391),
    (0.95, 5, 2.0150484),
    (0.995, 7, 3.4994833),
    (0.9, 20, 1.3253407),
]


@pytest.mark.parametrize(("p", "dof", "expected"), T_TABLE)
def test_t_quantile_matches_tables(p, dof, expected):
    assert t_quantile(p, dof) == pytest.approx(expected, abs=5e-7)


@pytest.mark.parametrize(("p", "dof", "expected"), T_TABLE)
def test_t_quantile_lower_tail_is_symmetric_and_inverts_the_cdf(p, dof, expected):
    assert t_quantile(1 - p, dof) == pytest.approx(-expected, abs=5e-7)
    assert student_t_cdf(t_quantile(p, dof), dof) == pytest.approx(p, abs=1e-12)


def test_t_quantile_takes_fractional_dof_and_approaches_the_normal():
    from scipy import stats as scipy_stats  # a dev dependency: the reference implementation

    for dof in (0.7, 1.5, 3.2347, 7.9, 123.4):
        assert t_quantile(0.975, dof) == pytest.approx(scipy_stats.t.ppf(0.975, dof), rel=1e-9)
    assert t_quantile(0.975, 1e6) == pytest.approx(1.959964, abs=1e-5)


def test_student_t_cdf_known_values():
    assert student_t_cdf(0.0, 3) == 0.5
    assert student_t_cdf(1.0, 1) == pytest.approx(0.75)  # Cauchy: 1/2 + atan(1)/pi
    assert student_t_cdf(-1.0, 1) == pytest.approx(0.25)
    assert student_t_cdf(1.0, 2) == pytest.approx(0.5 + 1 / (2 * math.sqrt(3)))  # t_2: 1/2 + t/(2*sqrt(2+t^2))


def test_regularized_incomplete_beta_closed_forms():
    assert regularized_incomplete_beta(0.3, 1, 1) == pytest.approx(0.3)
    assert regularized_incomplete_beta(0.3, 2, 1) == pytest.approx(0.09)  # x^a when b = 1
    assert regularized_incomplete_beta(0.3, 1, 3) == pytest.approx(1 - 0.7**3)  # 1 - (1-x)^b when a = 1
    assert regularized_incomplete_beta(0.0, 2, 3) == 0.0
    assert regularized_incomplete_beta(1.0, 2, 3) == 1.0
    with pytest.raises(ValueError):
        regularized_incomplete_beta(1.5, 2, 3)


def test_bad_quantile_arguments_raise():
    with pytest.raises(ValueError):
        t_quantile(1.0, 4)
    with pytest.raises(ValueError):
        t_quantile(0.975, 0)


def test_summarize_is_the_t_interval_over_runs():
    summary = summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    half_width = 2.7764451 * math.sqrt(2.5) / math.sqrt(5)  # t(0.975, 4) * s / sqrt(n)
    assert (summary.n, summary.mean, summary.std) == (5, 3.0, pytest.approx(math.sqrt(2.5)))
    assert summary.ci_low == pytest.approx(3.0 - half_width, abs=1e-6)
    assert summary.ci_high == pytest.approx(3.0 + half_width, abs=1e-6)


def test_welch_hand_computed_example_with_four_degrees_of_freedom():
    # Equal variances (s = 1) and n = 3 per arm: se^2 = 1/3 + 1/3, Welch-Satterthwaite dof = 2 (n - 1) = 4.
    difference = welch_difference([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    half_width = 2.7764451 * math.sqrt(2 / 3)
    assert difference.estimate == 3.0
    assert difference.dof == pytest.approx(4.0)
    assert difference.ci_high - difference.estimate == pytest.approx(half_width, abs=1e-6)
    assert difference.ci_low == pytest.approx(3.0 - half_width, abs=1e-6)
    assert difference.verdict == DIFFERS


def test_welch_satterthwaite_dof_with_unequal_variances():
    # baseline: n = 4, s^2 = 5/3 -> v1 = 5/12; other: n = 3, s^2 = 4 -> v2 = 4/3.
    difference = welch_difference([1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0])
    v1, v2 = 5 / 12, 4 / 3
    expected_dof = (v1 + v2) ** 2 / (v1**2 / 3 + v2**2 / 2)
    assert difference.dof == pytest.approx(expected_dof)  # 3.2347...
    assert difference.estimate == pytest.approx(1.5)
    half_width = t_quantile(0.975, expected_dof) * math.sqrt(v1 + v2)
    assert difference.ci_high == pytest.approx(1.5 + half_width)
    assert difference.verdict == WITHIN


def test_identical_arms_are_within_run_to_run_variance():
    runs = [10.1, 9.8, 10.3]
    difference = welch_difference(runs, list(runs))
    assert difference.estimate == 0.0
    assert difference.ci_low < 0.0 < difference.ci_high
    assert difference.verdict == WITHIN


def test_clearly_shifted_arms_differ_in_either_direction():
    baseline = [10.1, 9.8, 10.3]
    assert welch_difference(baseline, [value + 5.0 for value in baseline]).verdict == DIFFERS
    lower = welch_difference(baseline, [value - 5.0 for value in baseline])
    assert lower.ci_high < 0.0
    assert lower.verdict == DIFFERS


def test_a_small_shift_inside_the_noise_is_within_variance():
    assert welch_difference([10.0, 12.0, 8.0], [10.5, 12.5, 8.5]).verdict == WITHIN


def test_arms_without_variance_give_a_point_interval():
    same = welch_difference([4.0, 4.0], [4.0, 4.0])
    assert (same.estimate, same.ci_low, same.ci_high, same.dof, same.verdict) == (0.0, 0.0, 0.0, None, WITHIN)
    assert welch_difference([4.0, 4.0], [5.0, 5.0]).verdict == DIFFERS


def test_one_run_per_arm_is_refused():
    with pytest.raises(ValueError, match="at least 2 runs"):
        summarize([1.0])
    with pytest.raises(ValueError, match="at least 2 runs"):
        welch_difference([1.0], [1.0, 2.0])


def test_step_series_derives_tokens_per_second_and_skips_the_summary_entry():
    history = [
        {"step": 1, "step_time": 2.0, "num_tokens": 100.0, "reward": 1.0, "loss": 0.5, "completions/mean_length": 7},
        {"step": 2, "step_time": 1.0, "num_tokens": 160.0, "reward": 2.0, "loss": 0.25, "completions/mean_length": 8},
        # logging_steps = 2: values are means over steps 3 and 4
        {"step": 4, "step_time": 0.5, "num_tokens": 260.0, "reward": 4.0, "loss": 0.0, "completions/mean_length": 6},
        {"step": 4, "train_runtime": 9.0, "train_loss": 0.2},
    ]
    series = step_series(history)
    assert series[TOKENS_PER_SECOND] == {1: 50.0, 2: 60.0, 4: 100.0}
    assert series["reward"] == {1: 1.0, 2: 2.0, 4: 4.0}
    assert series["completion_length"] == {1: 7.0, 2: 8.0, 4: 6.0}
    assert mean_after_warmup(series["reward"], warmup_steps=1) == 3.0
    assert mean_after_warmup(series["step_time"], warmup_steps=0) == pytest.approx(3.5 / 3)
    with pytest.raises(ValueError, match="warm-up"):
        mean_after_warmup(series["loss"], warmup_steps=4)
