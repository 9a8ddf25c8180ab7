"""The unbiased pass@k estimator of Chen et al. 2021 ("Evaluating Large Language Models Trained on Code", eq. 1).

From ``n`` samples of one prompt of which ``c`` are correct, ``pass@k = 1 - C(n - c, k) / C(n, k)``: the probability
that at least one of ``k`` samples drawn without replacement from the ``n`` is correct, averaged over prompts. The
paper computes it as the product ``1 - prod_{i = n - c + 1}^{n} (1 - k / i)`` to avoid huge binomials; here Python's
exact integers do the binomials and one correctly rounded division gives the result, ``(C(n, k) - C(n - c, k)) /
C(n, k)``, so there is neither overflow nor cancellation even when pass@k is within 1e-15 of 0 or 1. No dependency
of the package (torch, TRL, evaluate) ships this estimator, hence this module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["mean_pass_at_k", "pass_at_k"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one prompt with ``c`` of ``n`` samples correct (``0 <= c <= n``, ``1 <= k <= n``)."""
    if not (isinstance(n, int) and isinstance(c, int) and isinstance(k, int)):
        raise TypeError(f"n, c and k must be integers, got {n!r}, {c!r}, {k!r}")
    if not 0 <= c <= n:
        raise ValueError(f"c={c} is invalid: expected 0 <= c <= n = {n}")
    if not 1 <= k <= n:
        raise ValueError(f"k={k} is invalid: expected 1 <= k <= n = {n}")
    total = math.comb(n, k)
    return (total - math.comb(n - c, k)) / total


def mean_pass_at_k(counts: Sequence[tuple[int, int]], k: int) -> float:
    """Mean pass@k over prompts, each given as ``(n, c)``; ValueError for an empty sequence."""
    if not counts:
        raise ValueError("mean_pass_at_k needs at least one prompt's (n, c)")
    return sum(pass_at_k(n, c, k) for n, c in counts) / len(counts)
