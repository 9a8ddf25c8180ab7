"""Smoke test of the pass@k benchmark: a few steps end to end, the JSON figures and the PNG."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from maxent_grpo_experiments.trl_baselines import ARMS
from tests.support.benchmark_script import load_benchmark


def test_reward_and_evaluation_of_answers() -> None:
    benchmark = load_benchmark("pass_at_k")
    assert benchmark.digit_pair_reward(["19", " 55", "91 ", "10", "5", "555", "=="]) == [1, 1, 1, 0, 0, 0, 0]
    figures = benchmark.evaluate(["19", "19", "28", "00"])
    assert (figures["n"], figures["correct"], figures["distinct_correct"]) == (4, 3, 2)
    assert figures["pass_at_k"] == {"1": 0.75, "2": 1.0, "4": 1.0}
    assert figures["normalized_entropy"] == pytest.approx(0.6365141682948128 / 2.1972245773362196)
    assert benchmark.evaluate(["37"] * 4)["normalized_entropy"] == 0.0


@pytest.mark.slow
def test_benchmark_runs_every_arm_and_writes_figures(tmp_path: Path) -> None:
    benchmark = load_benchmark("pass_at_k")
    argv = ["--steps", "3", "--seeds", "1", "--samples", "128", "--maxent", "maxent_tau=0.5"]
    result = benchmark.main([*argv, "--entropy-grid", "0.1", "0.05", "--output-dir", str(tmp_path)])

    written = json.loads((tmp_path / "pass_at_k.json").read_text())
    assert written == json.loads(json.dumps(result))
    assert written["settings"]["maxent_overrides"] == {"maxent_tau": 0.5}
    assert [(run["method"], run["seed"]) for run in written["runs"]] == [(method, 0) for method in ARMS]
    for run in written["runs"] + written["grid_runs"]:
        assert run["n"] == 128
        assert list(run["pass_at_k"]) == ["1", "2", "4", "8", "16", "32", "64"]
        values = list(run["pass_at_k"].values())
        assert values == sorted(values) and 0.0 <= values[0] <= values[-1] <= 1.0
        assert values[0] == pytest.approx(run["mean_reward"])
        assert 0 <= run["distinct_correct"] <= 9
    settings = written["settings"]
    assert settings["entropy_grid"] == [0.05, 0.1] and settings["entropy_coef_chosen"] in settings["entropy_grid"]
    assert set(written["entropy_grid"]) == {"0.05", "0.1"}
    for figures in written["entropy_grid"].values():
        assert set(figures) == {"mean_reward", "normalized_entropy", "distinct_correct", "admissible"}
    assert [(run["entropy_coef"], run["seed"]) for run in written["grid_runs"]] == [(0.05, 0), (0.1, 0)]
    fixed = next(run for run in written["runs"] if run["method"] == "grpo_entropy_fixed")
    assert fixed["entropy_coef"] == settings["entropy_coef_chosen"] and fixed in written["grid_runs"]
    for method in ARMS:
        summary = written["summary"][method]
        assert set(summary) == {"pass_at_k", "distinct_correct", "normalized_entropy", "final_step_reward"}
        assert len(written["reward_curves_mean_over_seeds"][method]) == 3
    assert set(written["maxent_versus"]) == set(ARMS) - {"maxent"}
    png = tmp_path / "pass_at_k.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
