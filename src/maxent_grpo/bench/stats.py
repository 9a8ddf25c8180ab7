"""Statistics of the benchmarks over seeds, from SciPy: intervals, paired and Welch differences, equivalence verdicts.

Every figure of a benchmark run is one number per seed (a run's mean over its steps, a pass@k). An arm is summarized by
its mean and 95% t interval over seeds (`summarize`). Two arms are compared by ``other - baseline``:

* **paired** (`paired_difference`) when both ran the same seeds: the runs of a seed share its initialisation and data
  order, so the per-seed differences cancel the seed's luck; the interval is the paired t interval
  (`scipy.stats.ttest_rel`);
* **Welch** (`welch_difference`) when the seeds differ between arms: Welch's unequal-variance t interval
  (`scipy.stats.ttest_ind` with ``equal_var=False``).

`compare` adds an equivalence margin ``m`` (the largest difference that does not matter) and a verdict:

* ``identical on every seed``: paired runs whose figures are equal seed by seed (no interval to give);
* ``equivalent``: the 90% interval (``1 - 2α`` with α = 0.05) lies inside ``(-m, m)``: both one-sided tests of the
  two one-sided tests procedure (TOST) reject a difference of ``m`` or more, at level α each;
* ``differs``: the 95% interval excludes 0 (and the difference is not inside the margin);
* ``inconclusive``: neither. `seeds_to_decide` then gives the number of seeds per arm at which the test would, with
  80% probability, reach one of the two, if the mean difference and the spread stayed as observed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as scipy_stats

CONFIDENCE = 0.95
#: The level of each one-sided test of the equivalence verdict; its interval is the (1 - 2α) one.
ALPHA = 1.0 - CONFIDENCE
#: The probability with which `seeds_to_decide`'s number of seeds reaches a verdict.
POWER = 0.8
#: `seeds_to_decide` looks no further than this many seeds per arm.
MAX_SEEDS = 10_000

PAIRED = "paired"
WELCH = "welch"

IDENTICAL = "identical on every seed"
EQUIVALENT = "equivalent"
DIFFERS = "differs"
INCONCLUSIVE = "inconclusive"
#: `Difference.verdict` when the 95% interval contains 0: no difference was detected (which is no equivalence).
WITHIN = "within run-to-run variance"

METHOD = (
    "Per arm: mean ± t(0.975, n-1)·s/√n over the seeds' run means (each run's mean over the steps after warm-up). "
    "Difference of an arm and the baseline arm: paired by seed when both arms ran the same seeds (the paired t "
    "interval of the per-seed differences, scipy.stats.ttest_rel), else Welch's unequal-variance t interval "
    "(scipy.stats.ttest_ind, equal_var=False); the table's method column says which. Verdict, with a margin m per "
    "metric: 'identical on every seed' when the paired runs are equal seed by seed; 'equivalent within ±m' when the "
    "90% interval lies inside (-m, m) (two one-sided tests at α = 0.05); 'differs' when the 95% interval excludes "
    "0; else 'inconclusive', with the number of seeds per arm that would reach a verdict with 80% probability if the "
    "mean difference and its spread stayed as observed."
)


def _check_sample(values: Sequence[float], what: str) -> None:
    if len(values) < 2:
        raise ValueError(f"{what} needs at least 2 runs to estimate run-to-run variance, got {len(values)}.")


def _critical_value(confidence: float, dof: float) -> float:
    """The two-sided t critical value: ``t((1 + confidence) / 2, dof)``."""
    return float(scipy_stats.t.ppf(0.5 + confidence / 2.0, dof))


@dataclass(frozen=True)
class ArmSummary:
    """One arm over its runs: n runs, mean and sample standard deviation of their run means, 95% interval."""

    n: int
    mean: float
    std: float
    ci_low: float
    ci_high: float


def summarize(values: Sequence[float]) -> ArmSummary:
    """Mean, sample standard deviation and the t interval ``mean ± t(0.975, n-1)·s/√n`` of ``values``.

    Raises:
        ValueError: with fewer than 2 values.
    """
    _check_sample(values, "an arm")
    mean, std = statistics.fmean(values), statistics.stdev(values)
    half_width = _critical_value(CONFIDENCE, len(values) - 1) * std / math.sqrt(len(values))
    return ArmSummary(len(values), mean, std, mean - half_width, mean + half_width)


@dataclass(frozen=True)
class Difference:
    """``other - baseline``, with its 95% interval and the 90% interval of the equivalence test.

    Attributes:
        method: `PAIRED` or `WELCH`.
        n: the pairs (paired) or the runs of the smaller arm (Welch).
        estimate: the mean difference.
        ci_low: the 95% interval's lower end.
        ci_high: its upper end.
        tost_low: the 90% interval's lower end (two one-sided tests at α = 0.05).
        tost_high: its upper end.
        dof: the t distribution's degrees of freedom (Welch–Satterthwaite for Welch); None when nothing varies
            (both intervals are then the point ``estimate``).
        spread: the standard deviation of one seed's difference: of the per-seed differences (paired), or
            ``√(s_baseline² + s_other²)`` (Welch).
    """

    method: str
    n: int
    estimate: float
    ci_low: float
    ci_high: float
    tost_low: float
    tost_high: float
    dof: float | None
    spread: float

    @property
    def verdict(self) -> str:
        """`WITHIN` when the 95% interval contains 0 (no difference detected), else `DIFFERS`."""
        return WITHIN if self.ci_low <= 0.0 <= self.ci_high else DIFFERS


def _point(method: str, n: int, estimate: float) -> Difference:
    return Difference(method, n, estimate, estimate, estimate, estimate, estimate, None, 0.0)


def _from_intervals(method: str, n: int, estimate: float, ci: Any, tost: Any, dof: Any, spread: float) -> Difference:
    """A `Difference` from SciPy's intervals, as plain floats (SciPy's are NumPy scalars, whose comparisons give NumPy
    booleans that JSON cannot write)."""
    return Difference(
        method, n, estimate, float(ci.low), float(ci.high), float(tost.low), float(tost.high), float(dof), spread
    )


def paired_difference(baseline: Sequence[float], other: Sequence[float]) -> Difference:
    """The paired t interval of ``other[i] - baseline[i]`` (``scipy.stats.ttest_rel``), one pair per seed.

    Raises:
        ValueError: with fewer than 2 pairs, or arms of different lengths.
    """
    if len(baseline) != len(other):
        raise ValueError(f"paired arms need one run each per seed, got {len(baseline)} and {len(other)} runs.")
    _check_sample(baseline, "a paired comparison")
    differences = [b - a for a, b in zip(baseline, other, strict=True)]
    estimate = statistics.fmean(differences)
    spread = statistics.stdev(differences)
    if spread == 0.0:
        return _point(PAIRED, len(differences), estimate)
    result = scipy_stats.ttest_rel(other, baseline)
    ci = result.confidence_interval(CONFIDENCE)
    tost = result.confidence_interval(1.0 - 2.0 * ALPHA)
    return _from_intervals(PAIRED, len(differences), estimate, ci, tost, result.df, spread)


def welch_difference(baseline: Sequence[float], other: Sequence[float]) -> Difference:
    """Welch's t interval of ``mean(other) - mean(baseline)`` (``scipy.stats.ttest_ind``, ``equal_var=False``).

    Raises:
        ValueError: with fewer than 2 runs in either arm.
    """
    _check_sample(baseline, "the baseline arm")
    _check_sample(other, "the compared arm")
    estimate = statistics.fmean(other) - statistics.fmean(baseline)
    spread = math.sqrt(statistics.variance(baseline) + statistics.variance(other))
    n = min(len(baseline), len(other))
    if spread == 0.0:
        return _point(WELCH, n, estimate)
    result = scipy_stats.ttest_ind(other, baseline, equal_var=False)
    ci = result.confidence_interval(CONFIDENCE)
    tost = result.confidence_interval(1.0 - 2.0 * ALPHA)
    return _from_intervals(WELCH, n, estimate, ci, tost, result.df, spread)


def _quantile_rule(points: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on (0, 1)."""
    nodes, weights = np.polynomial.legendre.leggauss(points)
    return (nodes + 1.0) / 2.0, weights / 2.0


#: The quadrature of `verdict_probability` over the quantiles of the observed spread (64 points: within 1e-4).
_QUANTILES, _QUANTILE_WEIGHTS = _quantile_rule(64)


def verdict_probability(estimate: float, spread: float, margin: float, seeds: np.ndarray) -> np.ndarray:
    """The probability that `compare`, on ``seeds`` paired seeds, reaches a verdict: equivalent or differs (either).

    For a true difference ``d = estimate`` and per-seed spread ``s = spread``, the mean difference of n seeds is
    normal (``d``, ``s/√n``) and the sample spread ``S`` is ``s·√(χ²(n-1)/(n-1))``, independent of it. Given ``S``,
    the verdict is "equivalent" when ``|mean| < m - t(1-α, n-1)·S/√n`` and "differs" when
    ``|mean| > t(1-α/2, n-1)·S/√n``; the probability of the union is exact given ``S`` and integrated over ``S``'s
    quantiles.

    Args:
        estimate: the true mean difference.
        spread: the standard deviation of one seed's difference, > 0.
        margin: the equivalence margin m >= 0.
        seeds: the numbers of seeds per arm, each >= 2.

    Returns:
        The probability for each of ``seeds``.
    """
    seeds = np.asarray(seeds, dtype=float)[:, None]
    dof = seeds - 1.0
    standard_error = spread / np.sqrt(seeds)
    shift, half_range = abs(estimate) / standard_error, margin / standard_error  # in standard errors
    sample_spread = np.sqrt(scipy_stats.chi2.ppf(_QUANTILES, dof) / dof)  # S / s at each quantile
    inside = np.maximum(half_range - scipy_stats.t.ppf(1.0 - ALPHA, dof) * sample_spread, 0.0)
    outside = scipy_stats.t.ppf(1.0 - ALPHA / 2.0, dof) * sample_spread
    normal = scipy_stats.norm.cdf
    equivalent = normal(inside - shift) - normal(-inside - shift)
    differs = normal(-outside - shift) + normal(shift - outside)
    # The two overlap only when they cover every mean (inside >= outside): then a verdict is certain.
    return np.minimum(equivalent + differs, 1.0) @ _QUANTILE_WEIGHTS


def seeds_to_decide(estimate: float, spread: float, margin: float, seeds: int) -> int | None:
    """The fewest seeds per arm, more than ``seeds``, at which the comparison would likely reach a verdict.

    "Likely" is with probability `POWER`, for a true difference ``estimate`` and a per-seed spread ``spread`` (both
    as observed), of reaching either verdict, equivalent or differs (`verdict_probability`), with the t
    distributions of a paired comparison (for Welch's comparison a slight overstatement of the seeds).

    Returns:
        That number of seeds, or None when no number up to `MAX_SEEDS` is enough, or when nothing varies (``s = 0``:
        more seeds of the same would change nothing).
    """
    if spread == 0.0:
        return None
    first, block = seeds + 1, 64
    while first <= MAX_SEEDS:  # in growing blocks: the answer is usually within the first
        seeds_per_arm = np.arange(first, min(first + block, MAX_SEEDS + 1))
        decided = np.flatnonzero(verdict_probability(estimate, spread, margin, seeds_per_arm) >= POWER)
        if decided.size:
            return int(seeds_per_arm[decided[0]])
        first, block = first + block, 2 * block
    return None


@dataclass(frozen=True)
class Comparison:
    """`compare`'s answer.

    Attributes:
        verdict: `IDENTICAL`, `EQUIVALENT` (within ±``margin``), `DIFFERS` or `INCONCLUSIVE`.
        margin: the equivalence margin m (in the metric's unit).
        difference: the interval behind the verdict; None for runs identical on every seed.
        seeds_needed: for an inconclusive verdict, `seeds_to_decide`'s number (None when none is enough); else None.
    """

    verdict: str
    margin: float
    difference: Difference | None
    seeds_needed: int | None = None

    @property
    def method(self) -> str:
        """`PAIRED` or `WELCH`: how the arms were compared (identical runs are paired runs)."""
        return PAIRED if self.difference is None else self.difference.method


def compare(baseline: Mapping[int, float], other: Mapping[int, float], margin: float) -> Comparison:
    """``other - baseline`` with its verdict: paired when both ran the same seeds (keys), else Welch's.

    Args:
        baseline: the baseline arm's figure per seed.
        other: the compared arm's figure per seed.
        margin: the equivalence margin m >= 0, in the figure's unit.

    Raises:
        ValueError: with fewer than 2 runs in an arm, or a negative margin.
    """
    if not margin >= 0.0:
        raise ValueError(f"the equivalence margin must be >= 0, got {margin}.")
    if baseline.keys() == other.keys():
        seeds = sorted(baseline)
        if len(seeds) >= 2 and all(baseline[seed] == other[seed] for seed in seeds):
            return Comparison(IDENTICAL, margin, None)
        difference = paired_difference([baseline[seed] for seed in seeds], [other[seed] for seed in seeds])
    else:
        difference = welch_difference(list(baseline.values()), list(other.values()))
    if -margin < difference.tost_low and difference.tost_high < margin:
        return Comparison(EQUIVALENT, margin, difference)
    if not difference.ci_low <= 0.0 <= difference.ci_high:
        return Comparison(DIFFERS, margin, difference)
    needed = seeds_to_decide(difference.estimate, difference.spread, margin, difference.n)
    return Comparison(INCONCLUSIVE, margin, difference, needed)
