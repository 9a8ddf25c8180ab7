"""The README's table of the objective benchmarks: read from the committed results, MaxEnt against the best TRL arm."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.benchmark_script import load_benchmark

ROOT = Path(__file__).resolve().parents[3]


def runs(values: dict[str, list[float]]) -> list[dict]:
    return [{"method": m, "seed": s, "x": v} for m, vs in values.items() for s, v in enumerate(vs)]


def test_a_cell_pairs_maxent_with_the_trl_arm_of_the_highest_mean() -> None:
    table = load_benchmark("results_table")
    values = {
        "grpo": [0.25, 0.25, 0.25],
        "grpo_entropy_fixed": [0.5, 0.25, 0.75],  # the best mean: MaxEnt is paired with it
        "grpo_entropy": [0.0, 0.5, 0.0],
        "grpo_top_entropy": [0.0, 0.0, 0.0],
        "maxent": [0.75, 0.5, 1.0],
    }
    assert table.cell(runs(values), lambda run: run["x"]) == "+0.250 (+0.250, +0.250) vs fixed bonus"
    values["maxent"] = [0.75, 0.75, 0.75]  # differences 0.25, 0.5, 0: mean 0.25, t interval 0.25 ± 4.303 · 0.25 / √3
    assert table.cell(runs(values), lambda run: run["x"]) == "+0.250 (-0.371, +0.871) vs fixed bonus"
    with pytest.raises(ValueError, match="different seeds"):
        table.cell(runs(values)[:-1], lambda run: run["x"])
    with pytest.raises(ValueError, match="two runs of seed 0"):
        table.cell([*runs(values), {"method": "grpo", "seed": 0, "x": 0.0}], lambda run: run["x"])


def test_the_readme_shows_the_table_of_the_committed_results() -> None:
    lines = load_benchmark("results_table").table()
    assert len(lines) >= 2 + 4  # the header and at least the four benchmarks committed before the minority routes
    assert "\n".join(lines) in (ROOT / "README.md").read_text()
