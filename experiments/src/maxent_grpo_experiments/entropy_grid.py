"""The fixed token-entropy arm of the held-out benchmarks: one run per grid coefficient and seed, the best one kept.

`maxent_grpo_experiments.trl_baselines` names TRL's options as benchmark arms; its ``grpo_entropy_fixed`` arm is GRPO
with a fixed ``entropy_coef`` chosen on a grid, as a TRL user tuning it would choose.
`benchmarks/reasoning_boundary.py` and `benchmarks/multi_token_answers.py` run it on every coefficient of
``--entropy-grid`` (`maxent_grpo_experiments.entropy_grid_option`) on every seed, interleaved with the other arms
(`run_plan`), then keep the coefficient `maxent_grpo_experiments.trl_baselines.choose_fixed_coefficient` picks from the
grid's mean held-out diversity (distinct correct answers per held-out prompt) and mean final training reward against
stock GRPO's, on the same seeds (`choose`): the arm's figures are those of the chosen coefficient's runs, and the whole
grid is reported beside them. Choosing on the seeds the arm is judged on favours the arm; ``--first-seed`` with a
single ``--entropy-grid`` value, the coefficient chosen before, checks it on fresh seeds.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from maxent_grpo_experiments.over_seeds import over_seeds
from maxent_grpo_experiments.trl_baselines import REWARD_TOLERANCE, choose_fixed_coefficient

__all__ = [
    "DIVERSITY",
    "FIXED",
    "REWARD",
    "arm_runs",
    "check_entropy_grid",
    "choose",
    "fixed_label",
    "run_plan",
]

#: The method key of the fixed-coefficient arm.
FIXED = "grpo_entropy_fixed"

#: The figure of a run the choice maximises, and the one it keeps within
#: `maxent_grpo_experiments.trl_baselines.REWARD_TOLERANCE` of stock GRPO's.
DIVERSITY = "distinct_correct"
REWARD = "final_training_reward"


def check_entropy_grid(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse a grid of several coefficients without stock GRPO among ``args.methods``: the choice needs its reward;
    drop repeated coefficients."""
    args.entropy_grid = list(dict.fromkeys(args.entropy_grid))
    if FIXED in args.methods and len(args.entropy_grid) > 1 and "grpo" not in args.methods:
        parser.error(f"choosing {FIXED} on a grid needs grpo among --methods, or a single --entropy-grid value")


def run_plan(methods: Sequence[str], grid: Sequence[float]) -> list[tuple[str, float | None]]:
    """The runs of one seed, in order: every method of ``methods`` once, the fixed arm once per coefficient of
    ``grid`` (with its coefficient; None for the others)."""
    plan: list[tuple[str, float | None]] = []
    for method in methods:
        plan += [(method, c) for c in grid] if method == FIXED else [(method, None)]
    return plan


def choose(
    grid_runs: Sequence[Mapping[str, Any]],
    grpo_runs: Sequence[Mapping[str, Any]],
    grid: Sequence[float],
    figures: Sequence[str],
) -> dict[str, Any]:
    """Choose the grid's coefficient and report the grid.

    Args:
        grid_runs: the fixed arm's runs, each with its ``entropy_coef``, `DIVERSITY`, `REWARD` and ``figures``.
        grpo_runs: stock GRPO's runs on the same seeds (unused, and possibly empty, with one coefficient).
        grid: the coefficients, in the order tried.
        figures: the run figures the report gives per coefficient over seeds (as `over_seeds` does), besides
            `DIVERSITY` and `REWARD`.

    Returns:
        ``grid``; ``chosen``, the coefficient `maxent_grpo_experiments.trl_baselines.choose_fixed_coefficient` picks
        (the only one of a one-value grid); the rule's ``diversity`` and ``reward`` figures and ``tolerance``;
        ``grpo_final_training_reward`` (None without GRPO runs); ``figures``: per coefficient (as a string) its
        figures over seeds; ``runs``: every grid run.
    """
    by_coefficient = {c: [r for r in grid_runs if r["entropy_coef"] == c] for c in grid}
    diversity = {c: statistics.fmean(r[DIVERSITY] for r in runs) for c, runs in by_coefficient.items()}
    reward = {c: statistics.fmean(r[REWARD] for r in runs) for c, runs in by_coefficient.items()}
    grpo_reward = statistics.fmean(r[REWARD] for r in grpo_runs) if grpo_runs else None
    if len(grid) == 1:
        chosen = grid[0]
    else:
        if grpo_reward is None:
            raise ValueError("choosing on a grid of several coefficients needs stock GRPO's runs")
        chosen = choose_fixed_coefficient(diversity, reward, grpo_reward)
    report: dict[str, Any] = {}
    for c, runs in by_coefficient.items():
        report[str(c)] = {}
        for key in (DIVERSITY, REWARD, *figures):
            report[str(c)].update(over_seeds(runs, key))
    return {
        "grid": list(grid),
        "chosen": chosen,
        "diversity": DIVERSITY,
        "reward": REWARD,
        "tolerance": REWARD_TOLERANCE,
        "grpo_final_training_reward": grpo_reward,
        "figures": report,
        "runs": list(grid_runs),
    }


def arm_runs(
    runs: Sequence[Mapping[str, Any]], grid_runs: Sequence[Mapping[str, Any]], chosen: float, order: Sequence[str]
) -> list[dict[str, Any]]:
    """Every arm's runs, the fixed arm's those of the ``chosen`` coefficient, per seed in the methods' ``order``."""
    by_key = {(r["method"], r["seed"]): dict(r) for r in runs}
    by_key |= {(r["method"], r["seed"]): dict(r) for r in grid_runs if r["entropy_coef"] == chosen}
    seeds = dict.fromkeys(r["seed"] for r in [*runs, *grid_runs])
    return [by_key[(m, s)] for s in seeds for m in order if (m, s) in by_key]


def fixed_label(coefficient: float, grid_size: int | None = None) -> str:
    """The fixed arm's label in tables and plots, with its coefficient: "best of grid" unless the grid had one
    value (``grid_size=1``: a coefficient chosen before, e.g. for fresh seeds)."""
    return f"GRPO + entropy_coef={coefficient:g} (fixed{'' if grid_size == 1 else ', best of grid'})"
