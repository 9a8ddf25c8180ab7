"""Statistics of an A/B benchmark: a 95% interval per arm over seeds and Welch's interval for a difference of arms.

Standard library only. Student's t quantile is found by bisection on the t CDF, written through the regularized
incomplete beta function, ``P(T <= t) = 1 - I_x(dof/2, 1/2) / 2`` with ``x = dof / (dof + t^2)`` for ``t >= 0``;
``I_x(a, b)`` is evaluated by its continued fraction (modified Lentz method, Numerical Recipes, 3rd ed., section 6.4)
with ``math.lgamma`` for the prefactor. Accuracy is about 1e-10, far below what a benchmark's intervals need.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95
WITHIN = "within run-to-run variance"
DIFFERS = "differs"
METHOD = (
    "Per arm: mean ± t(0.975, n-1)·s/√n over the seeds' run means (each run's mean over the steps after warm-up). "
    "Difference of an arm and the baseline arm: Welch's t interval with Welch–Satterthwaite degrees of freedom. "
    "t quantiles: bisection on the Student t CDF, computed as the regularized incomplete beta function by its "
    "continued fraction (modified Lentz). Verdict: 'within run-to-run variance' when the 95% interval of the "
    "difference contains 0, else 'differs'."
)

_CONTINUED_FRACTION_EPS = 1e-15
_CONTINUED_FRACTION_MAX_TERMS = 10_000
_FLOOR = 1e-300  # keeps Lentz's denominators away from zero
_BISECTION_STEPS = 200


def _nonzero(value: float) -> float:
    return value if abs(value) >= _FLOOR else _FLOOR


def _beta_continued_fraction(x: float, a: float, b: float) -> float:
    """The continued fraction of I_x(a, b), converging fast for x < (a + 1) / (a + b + 2)."""
    c = 1.0
    d = 1.0 / _nonzero(1.0 - (a + b) * x / (a + 1.0))
    fraction = d
    for m in range(1, _CONTINUED_FRACTION_MAX_TERMS + 1):
        even = m * (b - m) * x / ((a - 1.0 + 2 * m) * (a + 2 * m))
        d = 1.0 / _nonzero(1.0 + even * d)
        c = _nonzero(1.0 + even / c)
        fraction *= d * c
        odd = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 1.0 + 2 * m))
        d = 1.0 / _nonzero(1.0 + odd * d)
        c = _nonzero(1.0 + odd / c)
        fraction *= d * c
        if abs(d * c - 1.0) < _CONTINUED_FRACTION_EPS:
            return fraction
    raise ArithmeticError(f"the incomplete beta continued fraction did not converge for x={x}, a={a}, b={b}.")


def regularized_incomplete_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b) for 0 <= x <= 1 and a, b > 0."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"x={x} is outside [0, 1].")
    if not (a > 0 and b > 0):
        raise ValueError(f"a={a} and b={b} must both be > 0.")
    if x in (0.0, 1.0):
        return x
    prefactor = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return prefactor * _beta_continued_fraction(x, a, b) / a
    return 1.0 - prefactor * _beta_continued_fraction(1.0 - x, b, a) / b


def student_t_cdf(t: float, dof: float) -> float:
    """P(T <= t) for Student's t with ``dof`` > 0 degrees of freedom (not necessarily an integer)."""
    if not dof > 0:
        raise ValueError(f"dof={dof} must be > 0.")
    tail = 0.5 * regularized_incomplete_beta(dof / (dof + t * t), dof / 2.0, 0.5)
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, dof: float) -> float:
    """The t with P(T <= t) = p, by bisection on `student_t_cdf` (e.g. t_quantile(0.975, 4) = 2.7764451...)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p={p} must be in (0, 1).")
    if p < 0.5:
        return -t_quantile(1.0 - p, dof)
    low, high = 0.0, 1.0
    while student_t_cdf(high, dof) < p:
        low, high = high, 2.0 * high
    for _ in range(_BISECTION_STEPS):
        middle = 0.5 * (low + high)
        if student_t_cdf(middle, dof) < p:
            low = middle
        else:
            high = middle
        if high - low <= 1e-13 * high:
            break
    return 0.5 * (low + high)


def _critical_value(dof: float) -> float:
    return t_quantile(0.5 + CONFIDENCE / 2.0, dof)


def _check_sample(values: Sequence[float], what: str) -> None:
    if len(values) < 2:
        raise ValueError(f"{what} needs at least 2 runs to estimate run-to-run variance, got {len(values)}.")


@dataclass(frozen=True)
class ArmSummary:
    """One arm over its runs: n runs, mean and sample standard deviation of their run means, 95% interval."""

    n: int
    mean: float
    std: float
    ci_low: float
    ci_high: float


def summarize(values: Sequence[float]) -> ArmSummary:
    """Mean, sample standard deviation and the t interval ``mean ± t(0.975, n-1)·s/√n`` of ``values``."""
    _check_sample(values, "an arm")
    mean, std = statistics.fmean(values), statistics.stdev(values)
    half_width = _critical_value(len(values) - 1) * std / math.sqrt(len(values))
    return ArmSummary(len(values), mean, std, mean - half_width, mean + half_width)


@dataclass(frozen=True)
class Difference:
    """``other - baseline`` with Welch's 95% interval; ``dof`` is None when neither arm varies (a point interval)."""

    estimate: float
    ci_low: float
    ci_high: float
    dof: float | None

    @property
    def verdict(self) -> str:
        return WITHIN if self.ci_low <= 0.0 <= self.ci_high else DIFFERS


def welch_difference(baseline: Sequence[float], other: Sequence[float]) -> Difference:
    """Welch's interval for mean(other) - mean(baseline), with Welch–Satterthwaite degrees of freedom."""
    _check_sample(baseline, "the baseline arm")
    _check_sample(other, "the compared arm")
    baseline_var = statistics.variance(baseline) / len(baseline)
    other_var = statistics.variance(other) / len(other)
    estimate = statistics.fmean(other) - statistics.fmean(baseline)
    squared_error = baseline_var + other_var
    if squared_error == 0.0:
        return Difference(estimate, estimate, estimate, None)
    dof = squared_error**2 / (baseline_var**2 / (len(baseline) - 1) + other_var**2 / (len(other) - 1))
    half_width = _critical_value(dof) * math.sqrt(squared_error)
    return Difference(estimate, estimate - half_width, estimate + half_width, dof)
