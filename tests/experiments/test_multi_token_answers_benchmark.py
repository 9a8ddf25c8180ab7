"""Smoke test of the multi-token-answers benchmark: its reward, evaluation and entropy grid, and a run end to end."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

import pytest

from maxent_grpo.bench.stats import summarize
from maxent_grpo_experiments import entropy_grid
from maxent_grpo_experiments.held_out_methods import method_settings
from maxent_grpo_experiments.held_out_report import comparison_sentence
from maxent_grpo_experiments.over_seeds import paired_differences, summarize_runs, verdict
from tests.experiments.test_reasoning_boundary_benchmark import assert_pass_at_k_over_seeds
from tests.support.benchmark_script import load_benchmark


def test_reward_and_held_out_evaluation() -> None:
    benchmark = load_benchmark("multi_token_answers")
    prompts = ["347:", "347:", "347:", "347:", "000:"]
    completions = ["3+4+7=14\n59", "3+4+7=14\n58", "3+4+7=15\n69", "3+4+7=14\n59\n", "0+0+0=00\n00"]
    assert benchmark.derivation_reward(completions, prompts) == [1.0, 0.0, 0.0, 0.0, 1.0]
    group = ["3+4+7=14\n59"] * 100 + ["3+4+7=14\n68"] * 28 + ["3+4+7=14\n11"] * 64 + ["3+4+7=15\n69"] * 64
    figures = benchmark.evaluate(["347:", "990:"], [group, ["9+9+0=18\n99<pad>"] * 256])
    assert figures["pass_at_k"]["1"] == pytest.approx(0.25)  # half of "347:", none of "990:" (no EOS after 99)
    assert figures["pass_at_k"]["256"] == pytest.approx(0.5)
    assert figures["distinct_correct"] == 1.0  # two answers to "347:", none to "990:"
    assert figures["distinct_correct_share"] == pytest.approx(0.2)  # 2 of the 5 answers to "347:", 0 of 1
    assert figures["derivation_accuracy"] == pytest.approx((0.75 + 1.0) / 2)
    assert figures["correct_per_prompt"] == {"347:": 128, "990:": 0}


def _run(method: str, seed: int, value: float, coefficient: float | None = None, distinct: float = 1.0) -> dict:
    run = {"method": method, "seed": seed, "pass_at_k": {"1": value, "16": value + 0.1}}
    run |= {"distinct_correct": distinct * value, "final_training_reward": value}
    return run if coefficient is None else {**run, "entropy_coef": coefficient}


def test_the_entropy_grid_keeps_the_most_diverse_coefficient_within_grpos_reward() -> None:
    grid = [0.01, 0.05, 0.1]
    assert entropy_grid.run_plan(["grpo", "grpo_entropy_fixed", "maxent"], grid) == [
        ("grpo", None),
        *(("grpo_entropy_fixed", c) for c in grid),
        ("maxent", None),
    ]
    grpo = [_run("grpo", s, 0.5) for s in (0, 1)]
    runs = [grpo[0], _run("maxent", 0, 0.6), grpo[1], _run("maxent", 1, 0.7)]
    spread = {0.01: (0.5, 2.0), 0.05: (0.495, 3.0), 0.1: (0.3, 10.0)}  # reward, distinct answers per unit reward
    grid_runs = [_run("grpo_entropy_fixed", s, *spread[c][:1], c, spread[c][1]) for s in (0, 1) for c in grid]
    report = entropy_grid.choose(grid_runs, grpo, grid, ["pass_at_k"])
    # 0.1 has the most distinct answers but loses too much reward; 0.05 is within 0.01 of GRPO's and beats 0.01.
    assert (report["chosen"], report["grid"], report["grpo_final_training_reward"]) == (0.05, grid, 0.5)
    assert report["figures"]["0.1"]["distinct_correct"] == pytest.approx(3.0)
    assert report["figures"]["0.05"]["pass_at_k_per_seed"]["1"] == [0.495, 0.495]
    assert len(report["runs"]) == 6
    arms = entropy_grid.arm_runs(runs, grid_runs, report["chosen"], ["grpo", "grpo_entropy_fixed", "maxent"])
    order = [(m, s) for s in (0, 1) for m in ("grpo", "grpo_entropy_fixed", "maxent")]
    assert [(r["method"], r["seed"]) for r in arms] == order
    assert [r.get("entropy_coef") for r in arms] == [None, 0.05, None] * 2
    one = entropy_grid.choose([r for r in grid_runs if r["entropy_coef"] == 0.1], [], [0.1], [])
    assert one["chosen"] == 0.1 and one["grpo_final_training_reward"] is None
    assert method_settings("grpo_entropy_fixed", 0.05, []) == {"entropy_coef": 0.05}
    with pytest.raises(ValueError, match="needs its fixed coefficient"):
        method_settings("grpo_entropy_fixed", None, [])
    parser = argparse.ArgumentParser()
    with pytest.raises(SystemExit):
        entropy_grid.check_entropy_grid(
            parser, argparse.Namespace(methods=["grpo_entropy_fixed"], entropy_grid=[1, 2])
        )


def test_paired_figures_and_their_verdicts() -> None:
    runs = [_run("base", s, 0.1 * s) for s in range(3)] + [
        _run("maxent", s, 0.1 * s + d) for s, d in enumerate([0.2, 0.3, 0.25])
    ]
    runs = [{k: v for k, v in r.items() if not (r["method"] == "base" and k == "final_training_reward")} for r in runs]
    differences = {key: paired_differences(runs, "maxent", key) for key in ("pass_at_k", "distinct_correct")}
    paired = summarize([0.2, 0.3, 0.25])
    assert differences["distinct_correct"]["base"]["mean"] == pytest.approx(paired.mean)
    assert differences["distinct_correct"]["base"]["ci95"] == pytest.approx([paired.ci_low, paired.ci_high])
    assert paired_differences(runs, "maxent", "final_training_reward") == {}  # the base model has no training reward
    summary = summarize_runs([r for r in runs if r["method"] == "base"], ["pass_at_k", "final_training_reward"])
    assert set(summary) == {"pass_at_k", "pass_at_k_per_seed", "pass_at_k_ci95"}
    assert [verdict({"mean": 0, "ci95": ci}) for ci in ([0.1, 0.2], [-0.1, 0.2], [-0.2, -0.1], None)] == [
        "ahead", "level", "behind", "level"
    ]  # fmt: skip
    sentence = comparison_sentence("MaxEnt", "GRPO", [("at pass@1", {"mean": 0.25, "ci95": [0.1, 0.4]})])
    assert sentence == "MaxEnt vs GRPO: ahead at pass@1 (+0.250 [+0.100, +0.400])."


@pytest.mark.slow
def test_benchmark_runs_and_writes_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    benchmark = load_benchmark("multi_token_answers")
    # A weak base checks the run's plumbing as well.
    benchmark.SETUP = dataclasses.replace(benchmark.SETUP, pretrain_steps=40, pretrain_batch=64)
    prompts = ("151:", "347:", "990:")
    benchmark.heldout_prompts = lambda: prompts
    argv = ["--seeds", "2", "--first-seed", "3", "--steps", "2", "--prompts-per-step", "2", "--samples", "256"]
    argv += ["--entropy-grid", "0.01", "0.1", "--maxent", "maxent_tau=0.5", "--output-dir", str(tmp_path)]
    # Every arm, the opt-in KL comparator (stock GRPO with beta > 0 on an in-process base) named first.
    argv += ["--methods", "grpo_kl", "grpo", "grpo_entropy_fixed", "grpo_entropy", "grpo_top_entropy", "maxent"]
    result = benchmark.main(argv)

    written = json.loads((tmp_path / "multi_token_answers.json").read_text())
    assert written == json.loads(json.dumps(result))
    methods = ["grpo", "grpo_entropy_fixed", "grpo_entropy", "grpo_top_entropy", "grpo_kl", "maxent"]
    assert list(written["summary"]) == ["base", *methods]
    assert [(run["method"], run["seed"]) for run in written["runs"]] == [
        (m, s) for s in (3, 4) for m in ["base", *methods]
    ]
    assert written["settings"]["maxent_overrides"] == {"maxent_tau": 0.5}
    assert (written["settings"]["seeds"], written["settings"]["first_seed"]) == (2, 3)
    assert written["settings"]["heldout_prompts"] == list(prompts)
    grid = written["entropy_grid"]
    assert grid["grid"] == [0.01, 0.1] and grid["chosen"] in grid["grid"]
    assert written["settings"]["methods"]["grpo_entropy_fixed"] == {"entropy_coef": grid["chosen"]}
    assert written["settings"]["methods"]["grpo_kl"] == {"beta": 0.3}
    assert sorted((r["entropy_coef"], r["seed"]) for r in grid["runs"]) == [
        (c, s) for c in (0.01, 0.1) for s in (3, 4)
    ]
    assert set(grid["figures"]) == {"0.01", "0.1"}
    fixed = [r for r in written["runs"] if r["method"] == "grpo_entropy_fixed"]
    assert all(r["entropy_coef"] == grid["chosen"] for r in fixed)
    assert_pass_at_k_over_seeds(written["summary"], seeds=2)
    for method, figures in written["summary"].items():
        for key in ("distinct_correct", "derivation_accuracy"):
            assert len(figures[f"{key}_per_seed"]) == 2 and figures[f"{key}_ci95"] is not None
        assert ("final_training_reward" in figures) == (method != "base")
    minus = written["maxent_minus"]
    assert set(minus) == {
        "pass_at_k",
        "exact_pass_at_k",
        "distinct_correct",
        "derivation_accuracy",
        "final_training_reward",
    }
    for key in ("pass_at_k", "exact_pass_at_k", "distinct_correct", "derivation_accuracy"):
        assert list(minus[key]) == ["base", *methods[:-1]]
    assert list(minus["final_training_reward"]) == methods[:-1]
    by_seed = {(run["method"], run["seed"]): run for run in written["runs"]}
    for k, difference in minus["pass_at_k"]["grpo_entropy_fixed"].items():
        paired = summarize(
            [by_seed["maxent", s]["pass_at_k"][k] - by_seed["grpo_entropy_fixed", s]["pass_at_k"][k] for s in (3, 4)]
        )
        assert difference["mean"] == pytest.approx(paired.mean)
        assert difference["ci95"] == pytest.approx([paired.ci_low, paired.ci_high])
    n = written["settings"]["samples"]
    for run in written["runs"]:
        assert list(run["correct_per_prompt"]) == list(run["correct_probability_per_prompt"]) == list(prompts)
        for prompt, c in run["correct_per_prompt"].items():  # the exact probability is what sampling measures
            p = run["correct_probability_per_prompt"][prompt]
            assert abs(c / n - p) <= 5 * math.sqrt(p * (1 - p) / n) + 0.01, (run["method"], prompt, c, p)
    assert len(written["reward_curves_mean_over_seeds"]["maxent"]) == 2
    printed = capsys.readouterr().out
    assert "MaxEnt listwise (maxent_tau=0.5)" in printed and "(defaults)" not in printed
    assert "MaxEnt minus each method, paired by seed" in printed
    assert f"GRPO + entropy_coef={grid['chosen']:g} (fixed, best of grid)" in printed
    labels = ("GRPO (stock TRL)", "GRPO + adaptive entropy_coef", "GRPO + top_entropy_quantile=0.2")
    for label in (*labels, "GRPO + beta=0.3 (KL to the base)"):
        assert f"MaxEnt vs {label}: " in printed
    png = tmp_path / "multi_token_answers.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_split_puts_the_sums_no_training_derivation_ends_in_apart_and_pairs_by_seed(tmp_path: Path) -> None:
    split = load_benchmark("multi_token_answers_split")
    heldout = ["000:", "001:", "347:", "990:"]
    kinds = split.split_heldout(heldout)
    assert kinds == {"seen": ["347:", "990:"], "unseen": ["000:", "001:"]}
    counts = {  # (method, seed) -> correct samples of 4 per held-out prompt
        ("maxent", 0): {"000:": 1, "001:": 0, "347:": 4, "990:": 2},
        ("maxent", 1): {"000:": 2, "001:": 1, "347:": 3, "990:": 2},
        ("grpo", 0): {"000:": 0, "001:": 0, "347:": 4, "990:": 4},
        ("grpo", 1): {"000:": 1, "001:": 0, "347:": 4, "990:": 0},
        ("grpo_entropy_fixed=0.01", 0): {"000:": 4, "001:": 4, "347:": 4, "990:": 4},  # a grid run: left out
    }
    runs = [{"method": m, "seed": s, "correct_per_prompt": c} for (m, s), c in counts.items()]
    (tmp_path / "multi_token_answers.json").write_text(
        json.dumps({"settings": {"samples": 4, "heldout_prompts": heldout}, "runs": runs})
    )
    report = split.main(["--results", str(tmp_path), "--k", "1", "2"])
    unseen = report["unseen"]["1"]
    assert set(unseen["mean"]) == {"maxent", "grpo"}
    assert unseen["mean"]["maxent"] == pytest.approx(((1 / 4 + 0) / 2 + (2 / 4 + 1 / 4) / 2) / 2)
    assert unseen["maxent_minus"]["grpo"]["mean"] == pytest.approx(((1 / 4) / 2 + (3 / 4 - 1 / 4) / 2) / 2)
    seen = report["seen"]["2"]  # pass@2 of 4 samples with c correct: 1 - C(4 - c, 2) / C(4, 2)
    per_seed = [((1 - 0) + (1 - 1 / 6)) / 2, ((1 - 0) + (1 - 1 / 6)) / 2]
    assert seen["mean"]["maxent"] == pytest.approx(sum(per_seed) / 2)
    assert seen["mean"]["grpo"] == pytest.approx((1 + (1 + 0) / 2) / 2)
    assert seen["ci95"]["grpo"][0] < seen["mean"]["grpo"] < seen["ci95"]["grpo"][1]
