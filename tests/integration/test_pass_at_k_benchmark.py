"""Smoke test of the pass@k benchmark: a few steps end to end, the JSON figures and the PNG."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
def test_benchmark_runs_and_writes_figures(tmp_path: Path) -> None:
    benchmark = load_benchmark("pass_at_k")
    argv = [
        "--steps",
        "3",
        "--seeds",
        "1",
        "--samples",
        "128",
        "--maxent",
        "maxent_tau=0.5",
        "--output-dir",
        str(tmp_path),
    ]
    result = benchmark.main(argv)

    written = json.loads((tmp_path / "pass_at_k.json").read_text())
    assert written == json.loads(json.dumps(result))
    assert written["settings"]["maxent_overrides"] == {"maxent_tau": 0.5}
    assert [(run["method"], run["seed"]) for run in written["runs"]] == [("grpo", 0), ("maxent", 0)]
    for run in written["runs"]:
        assert run["n"] == 128
        assert list(run["pass_at_k"]) == ["1", "2", "4", "8", "16", "32", "64"]
        values = list(run["pass_at_k"].values())
        assert values == sorted(values) and 0.0 <= values[0] <= values[-1] <= 1.0
        assert values[0] == pytest.approx(run["mean_reward"])
        assert 0 <= run["distinct_correct"] <= 9
    for method in ("grpo", "maxent"):
        assert len(written["reward_curves_mean_over_seeds"][method]) == 3
    png = tmp_path / "pass_at_k.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
