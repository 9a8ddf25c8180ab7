"""Print the README's table of the objective benchmarks from their committed results.

Per benchmark, MaxEnt minus the best TRL option at pass@1, at the largest k and in the answers kept: the best TRL
option is, per figure, the TRL arm (stock GRPO, the fixed entropy bonus chosen on its grid, the adaptive bonus,
``top_entropy_quantile``) with the highest mean over seeds, and the difference is paired by seed with its 95% t
interval (`maxent_grpo.bench.stats.paired_difference`). Every figure is read from the per-seed runs of
``benchmarks/results/<name>/<name>.json``, so the table changes only when a committed result does (the README's table
is checked against this script's output by the tests).

    python benchmarks/results_table.py
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from maxent_grpo.bench.stats import paired_difference

RESULTS = Path(__file__).resolve().parent / "results"
TRL_ARMS = {
    "grpo": "GRPO",
    "grpo_entropy_fixed": "fixed bonus",
    "grpo_entropy": "adaptive bonus",
    "grpo_top_entropy": "top-entropy",
}
HEADER = (
    "| task (seeds) | what decides success | pass@1 | pass@k, largest k | answers kept |",
    "|---|---|---|---|---|",
)

Figure = Callable[[Mapping[str, Any]], float]


@dataclass(frozen=True)
class Row:
    """One benchmark of the table.

    Attributes:
        task: the task's name, a link to its page.
        success: what decides whether a sample succeeds.
        result: its committed JSON, relative to ``benchmarks/results``.
        pass_at_1: a run's pass@1 (from the logits where the benchmark has it).
        large_k: the largest k and a run's pass@k there; None where the benchmark samples no pass@k (its pass@1
            is then shown to be near 1.0 in every arm).
        kept: what the answers kept are counted by, and a run's figure.
    """

    task: str
    success: str
    result: str
    pass_at_1: Figure
    large_k: tuple[int, Figure] | None
    kept: tuple[str, Figure]


def _exact(k: int) -> Figure:
    return lambda run: run["exact_pass_at_k"][str(k)]


def _distinct(run: Mapping[str, Any]) -> float:
    return run["distinct_correct"]


def _entropy(run: Mapping[str, Any]) -> float:
    return run["normalized_entropy"]


ROWS = (
    Row(
        "[pick a vowel](docs/benchmarks/mode-coverage.md)",
        "any of 5 one-token answers",
        "mode_coverage/mode_coverage.json",
        lambda run: run["mean_reward"],
        None,
        ("answer entropy / ln 5", _entropy),
    ),
    Row(
        "[two digits that sum to 10](docs/benchmarks/pass-at-k.md)",
        "any of 9 two-token answers",
        "pass_at_k/pass_at_k.json",
        lambda run: run["pass_at_k"]["1"],
        (64, lambda run: run["pass_at_k"]["64"]),
        ("answer entropy / ln 9", _entropy),
    ),
    Row(
        "[reasoning boundary](docs/benchmarks/reasoning-boundary.md)",
        "any two-digit answer with the held-out prompt's digit sum",
        "reasoning_boundary/reasoning_boundary.json",
        _exact(1),
        (256, _exact(256)),
        ("distinct correct answers", _distinct),
    ),
    Row(
        "[multi-token answers](docs/benchmarks/multi-token-answers.md)",
        "an exact derivation, then any answer that fits its sum",
        "multi_token_answers/multi_token_answers.json",
        _exact(1),
        (256, _exact(256)),
        ("distinct correct answers", _distinct),
    ),
    Row(
        "[minority routes](docs/benchmarks/minority-routes.md)",
        "the held-out prompt's one valid route: the base model's majority, minority or rarest",
        "minority_routes/minority_routes.json",
        _exact(1),
        (256, _exact(256)),
        ("distinct exact routes (probe prompts)", _distinct),
    ),
)


def _per_seed(runs: Sequence[Mapping[str, Any]], method: str, figure: Figure) -> dict[int, float]:
    """``method``'s figure per seed; ValueError if it has no run or two runs of one seed."""
    values: dict[int, float] = {}
    for run in runs:
        if run["method"] == method:
            if run["seed"] in values:
                raise ValueError(f"{method} has two runs of seed {run['seed']}")
            values[run["seed"]] = figure(run)
    if not values:
        raise ValueError(f"{method} has no run")
    return values


def cell(runs: Sequence[Mapping[str, Any]], figure: Figure) -> str:
    """MaxEnt minus the TRL arm with the highest mean of ``figure``, paired by seed: ``+0.041 (+0.015, +0.067) vs
    GRPO``."""
    maxent = _per_seed(runs, "maxent", figure)
    arms = {arm: _per_seed(runs, arm, figure) for arm in TRL_ARMS}
    best = max(arms, key=lambda arm: sum(arms[arm].values()) / len(arms[arm]))
    seeds = sorted(maxent)
    if sorted(arms[best]) != seeds:
        raise ValueError(f"MaxEnt and {best} ran on different seeds: {seeds} and {sorted(arms[best])}")
    difference = paired_difference([arms[best][s] for s in seeds], [maxent[s] for s in seeds])
    return f"{difference.estimate:+.3f} ({difference.ci_low:+.3f}, {difference.ci_high:+.3f}) vs {TRL_ARMS[best]}"


def table_row(row: Row, results: Path = RESULTS) -> str:
    """The table's line for ``row``, from its committed JSON under ``results``."""
    result = json.loads((results / row.result).read_text())
    runs = result["runs"]  # one run per arm and seed (the fixed bonus's: its chosen coefficient's)
    seeds = len({run["seed"] for run in runs})
    if row.large_k is None:
        lowest = math.floor(100 * min(row.pass_at_1(run) for run in runs)) / 100
        large_k = f"not sampled (pass@1 at least {lowest:.2f} in every run)"
    else:
        large_k = f"k={row.large_k[0]}: {cell(runs, row.large_k[1])}"
    kept_by, kept = row.kept
    return (
        f"| {row.task} ({seeds}) | {row.success} | {cell(runs, row.pass_at_1)} | {large_k} | {kept_by}: "
        f"{cell(runs, kept)} |"
    )


def table(results: Path = RESULTS) -> list[str]:
    """The whole table, header first, one line per benchmark whose result is committed."""
    return [*HEADER, *(table_row(row, results) for row in ROWS if (results / row.result).exists())]


if __name__ == "__main__":
    print("\n".join(table()))
