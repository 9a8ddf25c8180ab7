"""The A/B benchmark end to end: 2 arms x 2 seeds of a few tiny steps, reports and trackio records naming their arm."""

from __future__ import annotations

import json
import sqlite3

import pytest

from maxent_grpo.bench import main
from maxent_grpo.bench.stats import DIFFERS, EQUIVALENT, IDENTICAL, INCONCLUSIVE, PAIRED

pytestmark = pytest.mark.slow

ARMS = ("before", "after")
TINY_EVERYTHING = [
    "--max-steps=3",
    "--set=gradient_accumulation_steps=2",
    "--set=steps_per_generation=2",
    "--set=max_completion_length=8",
]


def test_ab_smoke_writes_reports_and_named_trackio_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the reports go to outputs/benchmarks/ab under the working directory by default
    output_dir, trackio_dir = tmp_path / "outputs" / "benchmarks" / "ab", tmp_path / "trackio"
    argv = [
        "--arms=before,after",
        "--seeds=2",
        *TINY_EVERYTHING,
        f"--trackio-dir={trackio_dir}",
        "--project=ab-smoke",
        "--margin=reward=0.5",
    ]
    assert main(argv) == 0
    progress = capsys.readouterr().out
    assert "[4/4]" in progress and "ETA" in progress

    summary = json.loads((output_dir / "summary.json").read_text())
    assert summary["arms"] == list(ARMS)
    assert [(run["arm"], run["seed"]) for run in summary["runs"]] == [
        ("before", 1),
        ("after", 1),
        ("before", 2),
        ("after", 2),
    ]
    assert all(run["run_name"].startswith(f"{run['arm']}-seed{run['seed']}-") for run in summary["runs"])
    assert {run["trainer_class"] for run in summary["runs"]} == {
        "trl.trainer.grpo_trainer.GRPOTrainer",
        "maxent_grpo.trainer.MaxEntGRPOTrainer",
    }
    for name in ("reward", "step_time", "tokens_per_second", "completion_length", "loss"):
        metric = summary["metrics"][name]
        assert set(metric["arms"]) == set(ARMS)
        after = metric["differences"]["after"]
        assert after["method"] == PAIRED  # both arms ran seeds 1 and 2
        assert after["verdict"] in (IDENTICAL, EQUIVALENT, DIFFERS, INCONCLUSIVE)
        assert after["margin"] >= 0 and after["margin_given"] == summary["margins"][name]
    # The built-in backend generates what TRL generates: the same completions, hence the same reward, seed by seed.
    assert summary["metrics"]["reward"]["differences"]["after"]["verdict"] == IDENTICAL
    assert summary["margins"]["reward"] == "0.5"
    assert summary["metrics"]["tokens_per_second"]["arms"]["before"]["mean"] > 0

    table = (output_dir / "summary.md").read_text()
    assert "| reward | before |" in table and "| reward | after |" in table
    assert "\n- reward: after - before: identical on every seed (2 paired seeds)\n" in table
    assert "\nreward: after - before: identical on every seed (2 paired seeds)\n" in progress
    assert "| method | margin | verdict |" in table and "| paired t | ±0.500 | identical on every seed |" in table

    assert (output_dir / "metrics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    (database,) = trackio_dir.glob("*.db")
    with sqlite3.connect(database) as connection:
        configs = dict(connection.execute("SELECT run_name, config FROM configs").fetchall())
        logged_runs = {row[0] for row in connection.execute("SELECT DISTINCT run_name FROM metrics")}
    assert set(configs) == logged_runs == {run["run_name"] for run in summary["runs"]}
    for run_name, text in configs.items():
        config = json.loads(text)
        assert run_name.startswith(config["arm"] + "-")
        assert config["run_name"] == run_name
        assert config["recipe_hash"] == summary["recipe_hash"]
        assert config["git_commit"] == summary["git_commit"]
        assert config["trainer_class"].endswith("GRPOTrainer")
