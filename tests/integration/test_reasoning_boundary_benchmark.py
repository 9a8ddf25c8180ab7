"""Smoke test of the reasoning-boundary benchmark: its reward and evaluation, and a few steps end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.benchmark_script import load_benchmark


def test_reward_and_held_out_evaluation() -> None:
    benchmark = load_benchmark("reasoning_boundary")
    prompts = ["12=", "12=", "12=", "99=", "00="]
    assert benchmark.digit_sum_reward([" 21", "30", "22", "99", "0"], prompts) == [1.0, 1.0, 0.0, 1.0, 0.0]
    figures = benchmark.evaluate(["12=", "99="], [["03"] * 200 + ["21"] * 56, ["98"] * 256])
    assert figures["pass_at_k"]["1"] == pytest.approx(0.5)
    assert figures["pass_at_k"]["256"] == pytest.approx(0.5)
    assert figures["distinct_correct"] == 1.0  # two answers to "12=", none to "99="
    assert figures["distinct_correct_share"] == pytest.approx(0.25)  # 2 of the 4 answers to "12=", 0 of 1


@pytest.mark.slow
def test_benchmark_runs_and_writes_figures(tmp_path: Path) -> None:
    benchmark = load_benchmark("reasoning_boundary")
    argv = ["--seeds", "1", "--steps", "2", "--prompts-per-step", "2", "--samples", "256"]
    argv += ["--methods", "grpo", "maxent", "--maxent", "maxent_tau=0.5", "--output-dir", str(tmp_path)]
    result = benchmark.main(argv)

    written = json.loads((tmp_path / "reasoning_boundary.json").read_text())
    assert written == json.loads(json.dumps(result))
    assert [(run["method"], run["seed"]) for run in written["runs"]] == [("base", 0), ("grpo", 0), ("maxent", 0)]
    assert written["settings"]["maxent_overrides"] == {"maxent_tau": 0.5}
    for method, figures in written["summary"].items():
        assert list(figures["pass_at_k"]) == ["1", "4", "16", "64", "256"], method
        values = list(figures["pass_at_k"].values())
        assert values == sorted(values) and 0.0 <= values[0] <= values[-1] <= 1.0
        assert [per_seed[0] for per_seed in figures["pass_at_k_per_seed"].values()] == values
    assert len(written["reward_curves_mean_over_seeds"]["maxent"]) == 2
    png = tmp_path / "reasoning_boundary.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
