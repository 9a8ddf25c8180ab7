"""Smoke test of the mode-coverage benchmark: a few steps end to end, the JSON figures and the PNG."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.support.benchmark_script import load_benchmark


def test_normalized_vowel_entropy() -> None:
    benchmark = load_benchmark("mode_coverage")
    assert benchmark.normalized_vowel_entropy(list("aeiou" * 3)) == pytest.approx(1.0)
    assert benchmark.normalized_vowel_entropy(["a", "a", "", "x"]) == 0.0  # empty answers and consonants ignored
    assert benchmark.normalized_vowel_entropy(["", "x"]) == 0.0
    assert benchmark.normalized_vowel_entropy(["a", "e"]) == pytest.approx(math.log(2) / math.log(5))


@pytest.mark.slow
def test_benchmark_runs_and_writes_figures(tmp_path: Path) -> None:
    benchmark = load_benchmark("mode_coverage")
    steps = 3
    result = benchmark.main(["--steps", str(steps), "--seeds", "1", "--samples", "32", "--output-dir", str(tmp_path)])

    written = json.loads((tmp_path / "mode_coverage.json").read_text())
    assert written == json.loads(json.dumps(result))
    assert set(written) == {"settings", "runs", "summary", "curves_mean_over_seeds", "total_seconds"}
    assert [(run["method"], run["seed"]) for run in written["runs"]] == [("grpo", 0), ("maxent", 0)]
    for run in written["runs"]:
        assert 0.0 <= run["mean_reward"] <= 1.0
        assert 0.0 <= run["normalized_entropy"] <= 1.0 + 1e-9
        assert set(run["vowel_counts"]) == set("aeiou")
    for method in ("grpo", "maxent"):
        assert set(written["summary"][method]) == {"mean_reward", "normalized_entropy"}
        curves = written["curves_mean_over_seeds"][method]
        assert len(curves["reward"]) == len(curves["entropy"]) == steps
    png = tmp_path / "mode_coverage.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
