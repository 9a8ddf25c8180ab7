"""Smoke test of the mode-coverage benchmark: a few steps end to end, the JSON figures and the PNG."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from maxent_grpo_experiments.trl_baselines import ARMS
from tests.e2e import cli_runner
from tests.support.benchmark_script import load_benchmark, results_digest


def test_normalized_vowel_entropy() -> None:
    benchmark = load_benchmark("mode_coverage")
    assert benchmark.normalized_vowel_entropy(list("aeiou" * 3)) == pytest.approx(1.0)
    assert benchmark.normalized_vowel_entropy(["a", "a", "", "x"]) == 0.0  # empty answers and consonants ignored
    assert benchmark.normalized_vowel_entropy(["", "x"]) == 0.0
    assert benchmark.normalized_vowel_entropy(["a", "e"]) == pytest.approx(math.log(2) / math.log(5))


@pytest.mark.slow
def test_benchmark_runs_every_arm_and_writes_figures(tmp_path: Path) -> None:
    benchmark = load_benchmark("mode_coverage")
    steps = 3
    argv = ["--steps", str(steps), "--seeds", "1", "--samples", "32", "--entropy-grid", "0.05"]
    result = benchmark.main([*argv, "--output-dir", str(tmp_path)])

    written = json.loads((tmp_path / "mode_coverage.json").read_text())
    assert written == json.loads(json.dumps(result))
    assert set(written) == {
        "settings",
        "runs",
        "grid_runs",
        "summary",
        "entropy_grid",
        "maxent_versus",
        "curves_mean_over_seeds",
        "total_seconds",
    }
    assert [(run["method"], run["seed"]) for run in written["runs"]] == [(method, 0) for method in ARMS]
    for run in written["runs"] + written["grid_runs"]:
        assert 0.0 <= run["mean_reward"] <= 1.0
        assert 0.0 <= run["normalized_entropy"] <= 1.0 + 1e-9
        assert set(run["vowel_counts"]) == set("aeiou")
    settings = written["settings"]
    assert settings["methods"] == list(ARMS)
    assert settings["entropy_grid"] == [0.05] and settings["entropy_coef_chosen"] in settings["entropy_grid"]
    assert "choose_fixed_coefficient" in settings["entropy_coef_selection"]
    assert settings["trl_fields"]["grpo_entropy_fixed"] == {"entropy_coef": 0.05}
    assert settings["trl_fields"]["grpo_top_entropy"] == {"top_entropy_quantile": 0.2}
    assert set(written["entropy_grid"]) == {"0.05"}
    assert set(written["entropy_grid"]["0.05"]) == {"mean_reward", "normalized_entropy", "admissible"}
    [grid_run] = written["grid_runs"]
    fixed = next(run for run in written["runs"] if run["method"] == "grpo_entropy_fixed")
    assert fixed == grid_run and fixed["entropy_coef"] == 0.05 and fixed["phase"] == "grid"
    for method in ARMS:
        assert set(written["summary"][method]) == {"mean_reward", "normalized_entropy"}
        curves = written["curves_mean_over_seeds"][method]
        assert len(curves["reward"]) == len(curves["entropy"]) == steps
    assert set(written["maxent_versus"]) == set(ARMS) - {"maxent"}
    for figures in written["maxent_versus"].values():
        assert {figures[key]["verdict"] for key in ("mean_reward", "normalized_entropy")} <= {
            "ahead",
            "level",
            "behind",
        }
    png = tmp_path / "mode_coverage.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_script_run_from_another_folder_writes_there_outside_the_committed_results(tmp_path: Path) -> None:
    before = results_digest()
    script = cli_runner.ROOT / "benchmarks" / "mode_coverage.py"
    command = [
        sys.executable,
        str(script),
        "--steps",
        "2",
        "--seeds",
        "1",
        "--samples",
        "8",
        "--methods",
        "grpo",
        "maxent",
    ]
    result = cli_runner.run(command, cli_runner.offline_env(tmp_path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    assert json.loads((tmp_path / "outputs" / "benchmarks" / "mode_coverage" / "mode_coverage.json").read_text())
    assert results_digest() == before
