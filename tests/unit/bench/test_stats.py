"""The benchmarks' statistics: intervals and verdicts against SciPy's tests and textbook formulas."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from maxent_grpo.bench.metrics import TOKENS_PER_SECOND, mean_after_warmup, step_series
from maxent_grpo.bench.stats import (
    ALPHA,
    DIFFERS,
    EQUIVALENT,
    IDENTICAL,
    INCONCLUSIVE,
    PAIRED,
    POWER,
    WELCH,
    WITHIN,
    compare,
    paired_difference,
    seeds_to_decide,
    summarize,
    verdict_probability,
    welch_difference,
)

values = st.floats(min_value=-100.0, max_value=100.0, allow_nan=False, allow_infinity=False)
samples = st.lists(values, min_size=2, max_size=12)


def _varies(sample: list[float]) -> bool:
    return statistics.stdev(sample) > 1e-3


@st.composite
def paired_samples(draw: st.DrawFn) -> tuple[list[float], list[float]]:
    baseline = draw(samples)
    other = draw(st.lists(values, min_size=len(baseline), max_size=len(baseline)))
    return baseline, other


@settings(max_examples=60, deadline=None)
@given(samples)
def test_summarize_is_the_t_interval_of_the_mean(sample):
    assume(_varies(sample))
    summary = summarize(sample)
    low, high = scipy_stats.t.interval(
        0.95, len(sample) - 1, loc=statistics.fmean(sample), scale=scipy_stats.sem(sample)
    )
    assert (summary.n, summary.std) == (len(sample), pytest.approx(statistics.stdev(sample)))
    assert (summary.ci_low, summary.ci_high) == (pytest.approx(low), pytest.approx(high))


@settings(max_examples=60, deadline=None)
@given(paired_samples())
def test_paired_difference_is_the_t_interval_of_the_per_seed_differences(pair):
    baseline, other = pair
    differences = [b - a for a, b in zip(baseline, other, strict=True)]
    assume(_varies(differences))
    difference = paired_difference(baseline, other)
    n, mean, sd = len(differences), statistics.fmean(differences), statistics.stdev(differences)
    for confidence, low, high in (
        (0.95, difference.ci_low, difference.ci_high),
        (0.9, difference.tost_low, difference.tost_high),
    ):
        half_width = scipy_stats.t.ppf(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n)
        assert (low, high) == (pytest.approx(mean - half_width, abs=1e-9), pytest.approx(mean + half_width, abs=1e-9))
    assert (difference.method, difference.n, difference.dof) == (PAIRED, n, n - 1)
    assert difference.spread == pytest.approx(sd)


@settings(max_examples=60, deadline=None)
@given(samples, samples)
def test_welch_difference_has_the_welch_satterthwaite_interval(baseline, other):
    assume(_varies(baseline) and _varies(other))
    difference = welch_difference(baseline, other)
    v1, v2 = statistics.variance(baseline) / len(baseline), statistics.variance(other) / len(other)
    dof = (v1 + v2) ** 2 / (v1**2 / (len(baseline) - 1) + v2**2 / (len(other) - 1))
    estimate = statistics.fmean(other) - statistics.fmean(baseline)
    half_width = scipy_stats.t.ppf(0.975, dof) * math.sqrt(v1 + v2)
    assert difference.method == WELCH
    assert difference.dof == pytest.approx(dof)
    assert difference.estimate == pytest.approx(estimate, abs=1e-9)
    assert difference.ci_low == pytest.approx(estimate - half_width, abs=1e-9)
    assert difference.ci_high == pytest.approx(estimate + half_width, abs=1e-9)


@settings(max_examples=80, deadline=None)
@given(paired_samples(), st.floats(min_value=0.01, max_value=50.0))
def test_paired_verdict_agrees_with_scipys_one_sided_tests(pair, margin):
    baseline, other = pair
    differences = [b - a for a, b in zip(baseline, other, strict=True)]
    assume(_varies(differences))
    # TOST: both one-sided tests reject a difference of the margin or more (H0: d <= -m, and H0: d >= m).
    above_lower = scipy_stats.ttest_rel(other, [a - margin for a in baseline], alternative="greater").pvalue
    below_upper = scipy_stats.ttest_rel(other, [a + margin for a in baseline], alternative="less").pvalue
    two_sided = scipy_stats.ttest_rel(other, baseline).pvalue
    assume(min(abs(p - ALPHA) for p in (above_lower, below_upper)) > 1e-6 and abs(two_sided - ALPHA) > 1e-6)
    comparison = compare(dict(enumerate(baseline)), dict(enumerate(other)), margin)
    if above_lower < ALPHA and below_upper < ALPHA:
        assert comparison.verdict == EQUIVALENT
    elif two_sided < ALPHA:
        assert comparison.verdict == DIFFERS
    else:
        assert comparison.verdict == INCONCLUSIVE
        assert comparison.seeds_needed is None or comparison.seeds_needed > len(baseline)
    assert comparison.method == PAIRED


def test_identical_runs_are_identical_on_every_seed_without_an_interval():
    runs = {1: 24.1, 2: 25.3, 3: 24.9}
    comparison = compare(runs, dict(runs), margin=0.25)
    assert (comparison.verdict, comparison.method, comparison.difference) == (IDENTICAL, PAIRED, None)


def test_the_three_verdicts():
    baseline = {1: 10.0, 2: 12.0, 3: 11.0, 4: 13.0}
    shifted = {seed: value + 1.0 + 0.1 * (seed % 2) for seed, value in baseline.items()}  # +1.0 / +1.1
    assert compare(baseline, shifted, margin=0.5).verdict == DIFFERS
    nudged = {seed: value + 0.01 * (seed % 2) for seed, value in baseline.items()}  # +0 / +0.01
    equivalent = compare(baseline, nudged, margin=0.05)
    assert equivalent.verdict == EQUIVALENT
    assert -0.05 < equivalent.difference.tost_low < equivalent.difference.tost_high < 0.05
    noisy = {1: 10.5, 2: 11.6, 3: 11.4, 4: 12.7}  # +0.5 -0.4 +0.4 -0.3
    inconclusive = compare(baseline, noisy, margin=0.5)
    assert inconclusive.verdict == INCONCLUSIVE
    assert inconclusive.difference.ci_low < 0.0 < inconclusive.difference.ci_high
    assert inconclusive.seeds_needed is not None and inconclusive.seeds_needed > 4


def test_a_real_difference_smaller_than_the_margin_is_equivalent():
    baseline = {1: 10.0, 2: 12.0, 3: 11.0}
    other = {1: 10.02, 2: 12.021, 3: 11.019}
    comparison = compare(baseline, other, margin=0.1)
    assert comparison.difference.ci_low > 0.0
    assert comparison.verdict == EQUIVALENT


def test_arms_with_different_seeds_are_compared_by_welch():
    comparison = compare({1: 1.0, 2: 2.0, 3: 3.0}, {4: 4.0, 5: 5.0, 6: 6.0}, margin=0.5)
    assert (comparison.method, comparison.verdict) == (WELCH, DIFFERS)
    # Equal variances (s = 1), n = 3 per arm: Welch-Satterthwaite dof = 2 (n - 1) = 4.
    assert comparison.difference.dof == pytest.approx(4.0)
    assert comparison.difference.ci_high - 3.0 == pytest.approx(scipy_stats.t.ppf(0.975, 4) * math.sqrt(2 / 3))


def _simulated_verdict_rate(estimate: float, spread: float, margin: float, seeds: int, draws: int) -> float:
    """How often `compare` itself reaches a verdict on ``seeds`` paired seeds of normal differences (a fixed seed)."""
    rng = np.random.default_rng(57)
    baseline = dict.fromkeys(range(seeds), 0.0)
    decided = 0
    for _ in range(draws):
        other = dict(enumerate(rng.normal(estimate, spread, seeds).tolist()))
        decided += compare(baseline, other, margin).verdict != INCONCLUSIVE
    return decided / draws


@pytest.mark.parametrize(
    ("estimate", "margin", "needed"), [(0.2, 0.5, 40), (0.25, 0.5, 41), (0.3, 0.4, 59), (0.1, 0.3, 102)]
)
def test_seeds_to_decide_asks_for_either_verdict_not_each(estimate, margin, needed):
    # Each verdict on its own would need 71, 101, 90 and 157 seeds; one of the two is reached with 80% at these.
    assert seeds_to_decide(estimate, 1.0, margin, seeds=3) == needed
    assert verdict_probability(estimate, 1.0, margin, np.array([needed - 1, needed])) == pytest.approx(
        [POWER, POWER], abs=0.015
    )


def test_verdict_probability_is_how_often_compare_reaches_a_verdict():
    estimate, spread, margin = 0.25, 1.0, 0.5
    for seeds in (12, 41):  # 500 draws: a rate within 0.06 is within 3 standard errors
        simulated = _simulated_verdict_rate(estimate, spread, margin, seeds, draws=500)
        computed = verdict_probability(estimate, spread, margin, np.array([seeds]))[0]
        assert computed == pytest.approx(simulated, abs=0.06)


def test_seeds_to_decide_is_none_when_nothing_would_decide():
    assert seeds_to_decide(0.0, 0.0, 0.0, seeds=3) is None  # nothing varies: more seeds change nothing
    assert seeds_to_decide(0.0, 1.0, 0.0, seeds=3) is None  # no difference to find, no margin to fit in


def test_identical_runs_by_welch_are_a_point_interval():
    same = welch_difference([4.0, 4.0], [4.0, 4.0])
    assert (same.estimate, same.ci_low, same.ci_high, same.dof, same.verdict) == (0.0, 0.0, 0.0, None, WITHIN)
    assert welch_difference([4.0, 4.0], [5.0, 5.0]).verdict == DIFFERS
    assert compare({1: 4.0, 2: 4.0}, {3: 4.0, 4: 4.0}, margin=0.1).verdict == EQUIVALENT


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="at least 2 runs"):
        summarize([1.0])
    with pytest.raises(ValueError, match="at least 2 runs"):
        welch_difference([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="one run each per seed"):
        paired_difference([1.0, 2.0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="margin"):
        compare({1: 1.0, 2: 2.0}, {1: 1.5, 2: 2.0}, margin=-1.0)


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


def test_differences_are_plain_floats_that_json_can_write():
    import json

    for difference in (
        paired_difference([0.1, 0.4, 0.2], [0.3, 0.5, 0.6]),
        welch_difference([0.1, 0.4, 0.2], [0.3, 0.5]),
    ):
        fields = (difference.ci_low, difference.ci_high, difference.tost_low, difference.tost_high, difference.dof)
        assert all(type(value) is float for value in fields), fields
        json.dumps({"differs": difference.ci_low > 0.0, "verdict": difference.verdict})
