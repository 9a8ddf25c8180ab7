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


def test_reward_verdict_at_the_edges() -> None:
    verdict = load_benchmark("defaults_study").reward_verdict
    assert verdict({"mean": -0.005, "ci95": [-0.01, 0.0]}) == "within"  # the bound itself is within
    assert verdict({"mean": -0.011, "ci95": [-0.012, -0.0101]}) == "below"
    assert verdict({"mean": -0.01, "ci95": [-0.0101, -0.0099]}) == "undecided"
    assert verdict({"mean": 0.0, "ci95": None}) == "undecided"  # one seed decides nothing


def test_variants_on_the_command_line() -> None:
    study = load_benchmark("defaults_study")
    args = study.parse_args(["--variant", "cold", "maxent_tau=0.1", "maxent_tau_final=null", "--variant", "count"])
    assert args.variants == {"defaults": {}, "cold": {"maxent_tau": 0.1, "maxent_tau_final": None}, "count": {}}
    assert study.parse_args([]).variants == study.VARIANTS
    for bad in (
        ["--variant", "grpo"],
        ["--variant", "defaults", "maxent_tau=0.5"],  # the defaults are what the study measures: never overridden
        ["--variant", ""],
        ["--variant", "a=1"],
        ["--variant", "x", "tau"],
        ["--variant", "x", "maxent_bogus=1"],
        ["--variant", "x", "learning_rate=1"],  # a training setting would break the pairing with GRPO
        ["--variant", "x", "maxent_objective=grpo"],
        ["--variant", "x", "maxent_tau=0.1", "maxent_tau=0.2"],
        ["--variant", "x", "--variant", "x"],
        ["--seeds", "0"],
        ["--tasks", "letters"],
    ):
        with pytest.raises(SystemExit):
            study.parse_args(bad)


def test_settings_record_what_the_defaults_were() -> None:
    study = load_benchmark("defaults_study")
    digits = study.variant_settings("digits", {"maxent_mode_probability": "policy"})
    assert digits["maxent_mode_key"] == "last_line" and digits["maxent_mode_probability"] == "policy"
    vowel = study.variant_settings("vowel", {})
    assert (vowel["maxent_mode_key"], vowel["maxent_mode_probability"]) == ("first_token", "count")
    assert (vowel["maxent_tau"], vowel["maxent_tau_final"]) == (0.25, 0.003)
    assert set(vowel) == set(study.VARIANT_FIELDS) and "maxent_pass_at_k" in vowel
    assert "maxent_objective" not in vowel and all(name.startswith("maxent_") for name in vowel)


def test_benchmarks_train_the_tasks_they_trained_before() -> None:
    from maxent_grpo.single_prompt_task import SinglePromptTask
    from maxent_grpo_experiments.answer_tasks import DIGITS

    vowel = SinglePromptTask(prompt="pick a vowel:", mode_key="first_token")
    assert vowel == load_benchmark("mode_coverage").TASK
    pass_at_k = load_benchmark("pass_at_k")
    digits = SinglePromptTask(
        prompt="10=",
        mode_key="last_line",
        alphabet="0123456789=",
        maxent_settings={"maxent_mode_probability": "policy"},
    )
    assert digits == pass_at_k.TASK
    assert frozenset({"19", "28", "37", "46", "55", "64", "73", "82", "91"}) == DIGITS.correct


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
    settings = written["settings"]
    assert settings["variants"] == {"defaults": {}, "hot": {"maxent_tau": 1.0}} and settings["workers"] == 2
    assert settings["variant_settings"]["four"]["hot"]["maxent_tau"] == 1.0
    assert settings["tasks"]["four"]["correct"] == ["1", "2", "3", "4"]
    for run in written["runs"]:
        assert sum(run["answer_counts"].values()) == round(run["mean_reward"] * 16)
    assert set(written["versus_grpo"]["four"]) == {"defaults", "hot"}
    png = tmp_path / "defaults_study.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def interval(values: list[float]) -> str:
    low, high = values
    return f"({low:.3f}, {high:.3f})".replace("-", "−")


def test_page_shows_the_committed_run() -> None:
    study = load_benchmark("defaults_study")
    committed = json.loads((study.COMMITTED_OUTPUT_DIR / "defaults_study.json").read_text())
    page = (Path(__file__).resolve().parents[2] / "docs" / "benchmarks" / "defaults.md").read_text()
    assert list(committed["settings"]["variants"]) == list(study.VARIANTS)
    for task, arms in committed["summary"].items():
        for arm, figures in arms.items():
            entropy = f"{figures['normalized_entropy']:.3f} {interval(figures['normalized_entropy_ci95'])}"
            if arm == "grpo":
                total = len(committed["settings"]["tasks"][task]["correct"])
                row = f"| {task} | GRPO | {figures['mean_reward']:.3f} | | {entropy} | "
                row += f"{figures['distinct_correct']:.1f} of {total} |"
            else:
                versus = committed["versus_grpo"][task][arm]
                gap = versus["reward_minus_grpo"]
                low, high = (f"{v:+.3f}".replace("-", "−") for v in gap["ci95"])
                gap_text = f"{gap['mean']:+.3f}".replace("-", "−") + f" ({low}, {high}), {versus['reward']}"
                label = f"**{arm}**" if arm == "defaults" else arm
                row = f"| {task} | {label} | {figures['mean_reward']:.3f} | {gap_text} | "
                row += f"{entropy}, {versus['entropy']} | {figures['distinct_correct']:.1f} |"
            assert row in page, row
