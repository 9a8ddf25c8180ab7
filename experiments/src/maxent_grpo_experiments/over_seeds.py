"""Figures over seeds, and differences paired by seed, of the held-out benchmarks.

`benchmarks/reasoning_boundary.py` and `benchmarks/multi_token_answers.py` run every method on every seed from the
seed's base model, one run per (method, seed), each run a mapping with ``"method"``, ``"seed"`` and its figures: a
pass@k mapping (k as a string -> value) or a single number. From one seed to the next a method's figures move by as
much as most differences between methods, so each mean comes with its 95% t interval over seeds (not clipped to
[0, 1]) and a comparison of two methods is taken seed by seed: the runs of a seed share its base model and data order,
so pairing cancels the seed's luck. A comparison reads "ahead" when the paired interval lies above 0, "behind" when it
lies below, "level" when it contains 0 (or there is one seed, hence no interval). The intervals are those of
`maxent_grpo.bench.stats` (SciPy's t distribution; the paired one is `scipy.stats.ttest_rel`'s), as in
``maxent-grpo bench``.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from maxent_grpo.bench.stats import paired_difference as paired_t
from maxent_grpo.bench.stats import summarize

__all__ = [
    "format_difference",
    "interval",
    "over_seeds",
    "paired_difference",
    "paired_differences",
    "summarize_runs",
    "verdict",
]


def interval(values: Sequence[float]) -> list[float] | None:
    """The 95% t interval of the mean of ``values`` (one per seed).

    Returns:
        ``[low, high]``, or None with fewer than 2 values.
    """
    if len(values) < 2:
        return None
    arm = summarize(values)
    return [arm.ci_low, arm.ci_high]


def over_seeds(runs: Sequence[Mapping[str, Any]], key: str) -> dict[str, Any]:
    """One method's figure ``key`` over its ``runs``, one per seed.

    Args:
        runs: the method's runs, in seed order.
        key: a pass@k mapping of every run (``"pass_at_k"``, ``"exact_pass_at_k"``: k as a string -> value) or a
            number of every run.

    Returns:
        ``key``: the mean over seeds (per k for a mapping); ``<key>_per_seed``: the values, in the runs' order;
        ``<key>_ci95``: their 95% t interval (per k for a mapping; None with one seed).
    """
    if isinstance(runs[0][key], Mapping):
        per_seed = {k: [r[key][k] for r in runs] for k in runs[0][key]}
        return {
            key: {k: statistics.fmean(values) for k, values in per_seed.items()},
            f"{key}_per_seed": per_seed,
            f"{key}_ci95": {k: interval(values) for k, values in per_seed.items()},
        }
    values = [r[key] for r in runs]
    return {key: statistics.fmean(values), f"{key}_per_seed": values, f"{key}_ci95": interval(values)}


def summarize_runs(runs: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> dict[str, Any]:
    """One method's summary: `over_seeds` of each of ``keys`` that its runs have (the base model has no training
    reward), merged."""
    summary: dict[str, Any] = {}
    for key in keys:
        if key in runs[0]:
            summary.update(over_seeds(runs, key))
    return summary


def paired_difference(differences: Sequence[float]) -> dict[str, Any]:
    """``{"mean": ..., "ci95": [low, high] or None}`` of per-seed differences (their mean's t interval, which is the
    paired t interval of the two sides)."""
    return {"mean": statistics.fmean(differences), "ci95": interval(differences)}


def _paired(mine: Sequence[float], theirs: Sequence[float]) -> dict[str, Any]:
    """`paired_difference` of ``mine - theirs`` seed by seed, from `maxent_grpo.bench.stats.paired_difference`."""
    if len(mine) < 2:
        return paired_difference([a - b for a, b in zip(mine, theirs, strict=True)])
    difference = paired_t(theirs, mine)
    return {"mean": difference.estimate, "ci95": [difference.ci_low, difference.ci_high]}


def paired_differences(runs: Sequence[Mapping[str, Any]], method: str, key: str) -> dict[str, Any]:
    """Per other method, ``method``'s figure ``key`` minus the other's, paired by seed.

    Every method that has ``key`` must have run on every seed ``method`` ran on, as the benchmarks run them; methods
    whose runs lack ``key`` (the base model has no training reward) are left out.

    Args:
        runs: every run of the benchmark.
        method: the method compared with the others (``"maxent"``).
        key: a pass@k mapping of every run, or a number.

    Returns:
        Per other method, in the order the runs name them: per k (for a mapping) or directly, the mean difference
        over seeds and its 95% t interval (None with one seed), as `paired_difference` gives them.
    """
    by_seed = {(r["method"], r["seed"]): r[key] for r in runs if key in r}
    seeds = sorted({r["seed"] for r in runs if r["method"] == method})
    result: dict[str, Any] = {}
    for other in dict.fromkeys(r["method"] for r in runs if key in r):
        if other == method:
            continue
        mine = by_seed[(method, seeds[0])]
        if isinstance(mine, Mapping):
            result[other] = {
                k: _paired([by_seed[(method, s)][k] for s in seeds], [by_seed[(other, s)][k] for s in seeds])
                for k in mine
            }
        else:
            result[other] = _paired([by_seed[(method, s)] for s in seeds], [by_seed[(other, s)] for s in seeds])
    return result


def format_difference(difference: Mapping[str, Any]) -> str:
    """``+0.012 [-0.004, +0.028]``: a paired difference and its 95% interval (the mean alone with one seed)."""
    text = f"{difference['mean']:+.3f}"
    if difference["ci95"] is not None:
        low, high = difference["ci95"]
        text += f" [{low:+.3f}, {high:+.3f}]"
    return text


def verdict(difference: Mapping[str, Any]) -> str:
    """``"ahead"`` when the paired 95% interval lies above 0, ``"behind"`` below, else ``"level"`` (also when there
    is no interval: one seed tells nothing apart)."""
    if difference["ci95"] is None:
        return "level"
    low, high = difference["ci95"]
    if low > 0:
        return "ahead"
    if high < 0:
        return "behind"
    return "level"
