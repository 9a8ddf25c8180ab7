"""The unbiased pass@k estimator against brute-force enumeration and its limits."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from maxent_grpo_experiments.pass_at_k import mean_pass_at_k, pass_at_k


@st.composite
def small_cases(draw: st.DrawFn) -> tuple[int, int, int]:
    n = draw(st.integers(1, 10))
    return n, draw(st.integers(0, n)), draw(st.integers(1, n))


@given(small_cases())
def test_matches_enumeration_of_every_k_subset(case: tuple[int, int, int]) -> None:
    n, c, k = case
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(samples, k))
    expected = sum(any(subset) for subset in subsets) / len(subsets)
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


@given(st.integers(1, 300).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))))
def test_pass_at_1_is_the_fraction_correct_and_grows_with_k(case: tuple[int, int]) -> None:
    n, c = case
    assert pass_at_k(n, c, 1) == pytest.approx(c / n, abs=1e-15)
    values = [pass_at_k(n, c, k) for k in range(1, n + 1)]
    assert all(0.0 <= v <= 1.0 for v in values)
    assert values == sorted(values)
    assert values[-1] == (1.0 if c else 0.0)


def test_large_n_stays_exact_where_the_naive_ratio_overflows() -> None:
    # C(2000, 1000) does not fit in a float; the product form of Chen et al. agrees to rounding.
    n, c, k = 2000, 3, 1000
    product = 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))
    assert pass_at_k(n, c, k) == pytest.approx(product, rel=1e-12)
    assert pass_at_k(256, 1, 1) == 1 / 256
    assert 0 < pass_at_k(10**6, 1, 1) < 1e-5  # no cancellation near 0


def test_mean_over_prompts_and_bad_input() -> None:
    assert mean_pass_at_k([(4, 0), (4, 4)], 2) == 0.5
    with pytest.raises(ValueError, match="at least one"):
        mean_pass_at_k([], 1)
    for n, c, k in [(4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5)]:
        with pytest.raises(ValueError):
            pass_at_k(n, c, k)
    with pytest.raises(TypeError):
        pass_at_k(4.0, 2, 1)  # type: ignore[arg-type]
