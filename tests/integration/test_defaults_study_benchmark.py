"""The defaults study: its verdicts on hand-made runs, its command line, and a few steps end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.benchmark_script import load_benchmark


def runs_of(task: str, method: str, rewards: list[float], entropy: float) -> list[dict]:
    return [
        {
            "task": task,
            "method": method,
            "seed": seed,
            "mean_reward": r,
            "normalized_entropy": entropy,
            "distinct_correct": 3,
        }
        for seed, r in enumerate(rewards)
    ]


def test_verdicts_read_the_paired_interval_against_the_targets() -> None:
    study = load_benchmark("defaults_study")
    grpo = [1.0, 0.99, 1.0, 0.995]
    runs = [
        *runs_of("four", "grpo", grpo, 0.1),
        *runs_of("four", "close", [r - 0.002 for r in grpo], 0.97),  # within 0.01 beyond noise, entropy met
        *runs_of("four", "far", [r - 0.05 for r in grpo], 0.99),  # below: the whole interval under -0.01
        *runs_of("four", "noisy", [0.9, 1.0, 0.95, 1.0], 0.5),  # undecided, entropy not met
    ]
    result = study.analyse(runs, ["four"], ["close", "far", "noisy"])
    versus = result["versus_grpo"]["four"]
    assert (versus["close"]["reward"], versus["close"]["entropy"]) == ("within", "met")
    assert versus["close"]["reward_minus_grpo"]["mean"] == pytest.approx(-0.002)
    assert versus["far"]["reward"] == "below"
    assert (versus["noisy"]["reward"], versus["noisy"]["entropy"]) == ("undecided", "not met")
    assert result["misses"]["close"] == []
    assert result["misses"]["far"] == ["four: reward -0.050 [-0.050, -0.050] against GRPO (below)"]
    assert len(result["misses"]["noisy"]) == 2 and "answer entropy 0.500 < 0.95" in result["misses"]["noisy"][1]
    assert set(result["summary"]["four"]) == {"grpo", "close", "far", "noisy"}
    one_seed = study.reward_verdict({"mean": -0.005, "ci95": None})
    assert one_seed == "within"


def test_variants_on_the_command_line() -> None:
    study = load_benchmark("defaults_study")
    args = study.parse_args(["--variant", "cold", "maxent_tau=0.1", "maxent_tau_final=null", "--variant", "count"])
    assert args.variants == {"defaults": {}, "cold": {"maxent_tau": 0.1, "maxent_tau_final": None}, "count": {}}
    assert study.parse_args([]).variants == study.VARIANTS
    for bad in (
        ["--variant", "grpo"],
        ["--variant", "a=1"],
        ["--variant", "x", "tau"],
        ["--seeds", "0"],
        ["--variant", "x", "--variant", "x"],
        ["--tasks", "letters"],
    ):
        with pytest.raises(SystemExit):
            study.parse_args(bad)


@pytest.mark.slow
def test_study_runs_every_arm_on_every_seed_and_writes_figures(tmp_path: Path) -> None:
    study = load_benchmark("defaults_study")
    argv = ["--steps", "2", "--seeds", "2", "--samples", "16", "--tasks", "four", "--workers", "2"]
    result = study.main([*argv, "--variant", "hot", "maxent_tau=1.0", "--output-dir", str(tmp_path)])

    written = json.loads((tmp_path / "defaults_study.json").read_text())
    assert written == json.loads(json.dumps(result))
    assert [(r["method"], r["seed"]) for r in written["runs"]] == [
        (m, s) for s in (0, 1) for m in ("grpo", "defaults", "hot")
    ]
    assert written["settings"]["variants"] == {"defaults": {}, "hot": {"maxent_tau": 1.0}}
    assert written["settings"]["tasks"]["four"]["correct"] == ["1", "2", "3", "4"]
    for run in written["runs"]:
        assert sum(run["answer_counts"].values()) == round(run["mean_reward"] * 16)
    assert set(written["versus_grpo"]["four"]) == {"defaults", "hot"}
    assert written["versus_grpo"]["four"]["hot"]["reward"] in {"within", "below", "undecided"}
    png = tmp_path / "defaults_study.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_page_shows_the_committed_run() -> None:
    study = load_benchmark("defaults_study")
    committed = json.loads((study.COMMITTED_OUTPUT_DIR / "defaults_study.json").read_text())
    page = (Path(__file__).resolve().parents[2] / "docs" / "benchmarks" / "defaults.md").read_text()
    assert list(committed["settings"]["variants"]) == list(study.VARIANTS)
    for task, arms in committed["summary"].items():
        for arm, figures in arms.items():
            label = "GRPO" if arm == "grpo" else f"**{arm}**" if arm == "defaults" else arm
            row = f"| {task} | {label} | {figures['mean_reward']:.3f} |"
            assert row in page, row
            if arm != "grpo":
                versus = committed["versus_grpo"][task][arm]
                gap = f"{versus['reward_minus_grpo']['mean']:+.3f}".replace("-", "−")
                assert f"{row} {gap} (" in page and f"{versus['reward']} |" in page
