"""Smoke test of the minority-routes benchmark: its reward, evaluation and gates, and a run end to end."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

from maxent_grpo.bench.stats import summarize
from maxent_grpo_experiments.route_derivations import ROLES, completion, route_roles
from tests.experiments.test_reasoning_boundary_benchmark import assert_pass_at_k_over_seeds
from tests.support.benchmark_script import load_benchmark


def test_reward_and_held_out_evaluation() -> None:
    benchmark = load_benchmark("minority_routes")
    prompts = ["5310:", "5310:", "5310:", "0197:", "0197:"]
    completions = [completion("5310:", "R2"), completion("5310:", "R3"), "5+3=08-1=07+0=07\n08"]
    completions += [completion("0197:", "R1"), completion("0197:", "R3")]  # R3 is exact but invalid on "0197:"
    assert benchmark.route_reward(completions, prompts) == [1.0, 1.0, 0.0, 1.0, 0.0]
    group = [completion("0197:", "R1")] * 64 + [completion("0197:", "R3")] * 128 + ["0+1=01"] * 64
    figures = benchmark.evaluate(["0197:"], [group])
    assert figures["pass_at_k"]["1"] == pytest.approx(0.25) and figures["pass_at_k"]["256"] == 1.0
    assert figures["correct_per_prompt"] == {"0197:": 64}
    assert figures["sampled_routes_per_prompt"] == {"0197:": {"R1": 64, "R2": 0, "R3": 128}}


def test_the_calibration_gates() -> None:
    benchmark = load_benchmark("minority_routes")
    base = {f"route_exactness_{role}": 0.5 for role in ROLES} | {"route_share_rarest": 0.01}
    base["exact_pass_at_k"] = {"256": 0.7}
    grpo = {"route_share_rarest": 0.004}
    passed = benchmark.calibration({"base": base, "grpo": grpo})
    assert passed["passed"] and passed["rarest_route_share"] == {"base": 0.01, "grpo": 0.004}
    failed = benchmark.calibration(
        {
            "base": base | {"route_exactness_rarest": 0.1, "exact_pass_at_k": {"256": 0.95}},
            "grpo": {"route_share_rarest": 0.006},
        }
    )
    assert failed["gates"] == dict.fromkeys(failed["gates"], False) and not failed["passed"]
    assert benchmark.calibration({"base": base}) is None


def difference(mean: float, low: float, high: float) -> dict:
    return {"mean": mean, "ci95": [low, high]}


def test_the_pre_registered_verdicts() -> None:
    benchmark = load_benchmark("minority_routes")
    arms = benchmark.TRL_ARMS
    ahead, level = difference(0.1, 0.05, 0.15), difference(0.01, -0.02, 0.04)
    summary = {"base": {}} | {m: {"exact_pass_at_k": {"1": 0.30}} for m in (*arms, "maxent")}
    minus = {
        "exact_pass_at_k": {arm: {"16": ahead, "256": ahead} for arm in arms},
        "route_exactness": {arm: difference(0.02, -0.01, 0.05) for arm in arms},
        "minority_share": {arm: difference(0.2, 0.1, 0.3) for arm in arms},
        "exact_pass_at_k_majority": {"grpo": {"256": level}},
        "exact_pass_at_k_minority": {"grpo": {"256": ahead}},
        "exact_pass_at_k_rarest": {"grpo": {"256": difference(0.3, 0.2, 0.4)}},
    }
    verdicts = benchmark.predictions(summary, minus)
    assert verdicts["predictions"] == {"P1": True, "P2": True, "P3": True, "P4": True}
    assert verdicts["falsified"] == {"F1": False, "F2": False, "F3": False} and verdicts["held"]

    # The adaptive bonus level at both k with an exactness 0.005 above MaxEnt's: P1 fails and F1 holds.
    minus["exact_pass_at_k"]["grpo_entropy"] = {"16": level, "256": level}
    minus["route_exactness"]["grpo_entropy"] = difference(-0.005, -0.02, 0.01)
    summary["grpo"]["exact_pass_at_k"]["1"] = 0.33  # MaxEnt 0.03 below the best pass@1: P2 fails
    minus["minority_share"]["grpo_top_entropy"] = difference(-0.1, -0.2, 0.0)  # ahead without a larger share: F2
    minus["exact_pass_at_k_majority"]["grpo"]["256"] = difference(0.25, 0.1, 0.4)  # P4 fails; 0.25 >= 0.2: F3
    verdicts = benchmark.predictions(summary, minus)
    assert verdicts["predictions"] == {"P1": False, "P2": False, "P3": False, "P4": False}
    assert verdicts["falsified"] == {"F1": True, "F2": True, "F3": True} and not verdicts["held"]
    assert benchmark.predictions({"base": {}, "grpo": {}}, {}) is None


@pytest.mark.slow
def test_benchmark_runs_and_writes_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    benchmark = load_benchmark("minority_routes")
    # A weak base checks the run's plumbing as well.
    benchmark.SETUP = dataclasses.replace(benchmark.SETUP, pretrain_steps=40, pretrain_batch=64)
    prompts = ("0197:", "0102:", "0025:")  # one per route: only R1, only R2, only R3 is valid
    benchmark.heldout_prompts = lambda: prompts
    benchmark.probe_prompts = lambda: ("5310:", "9870:")
    argv = ["--seeds", "2", "--first-seed", "3", "--steps", "2", "--prompts-per-step", "2", "--samples", "256"]
    argv += ["--entropy-grid", "0.01", "0.1"]
    result = benchmark.main([*argv, "--workers", "2", "--output-dir", str(tmp_path)])  # a process per seed

    written = json.loads((tmp_path / "minority_routes.json").read_text())
    assert written == json.loads(json.dumps(result))
    methods = ["grpo", "grpo_entropy_fixed", "grpo_entropy", "grpo_top_entropy", "maxent"]
    assert list(written["summary"]) == ["base", *methods]
    assert [(run["method"], run["seed"]) for run in written["runs"]] == [
        (m, s) for s in (3, 4) for m in ["base", *methods]
    ]
    assert written["settings"]["heldout_prompts"] == list(prompts)
    assert written["entropy_grid"]["chosen"] in (0.01, 0.1)
    assert_pass_at_k_over_seeds(written["summary"], seeds=2)
    for method, figures in written["summary"].items():
        for role in ROLES:
            assert set(figures[f"exact_pass_at_k_{role}"]) == {str(k) for k in benchmark.KS}
            assert len(figures[f"route_share_{role}_per_seed"]) == 2
        assert ("final_training_reward" in figures) == (method != "base")
    minus = written["maxent_minus"]
    for k in ("1", "16", "256"):
        for other in ("base", *methods[:-1]):
            difference = minus["exact_pass_at_k"][other][k]
            assert set(difference) == {"mean", "ci95"} and len(difference["ci95"]) == 2
    by_seed = {(run["method"], run["seed"]): run for run in written["runs"]}
    paired = summarize(
        [by_seed["maxent", s]["route_exactness"] - by_seed["grpo", s]["route_exactness"] for s in (3, 4)]
    )
    assert minus["route_exactness"]["grpo"]["mean"] == pytest.approx(paired.mean)
    n = written["settings"]["samples"]
    for run in written["runs"]:
        assert run["route_roles"] == route_roles(run["seed"])
        for prompt in prompts:  # one valid route: its probability times its exactness is the prompt's success
            p = run["correct_probability_per_prompt"][prompt]
            product = run["route_probability_per_prompt"][prompt] * run["route_exactness_per_prompt"][prompt]
            assert product == pytest.approx(p, rel=1e-4, abs=1e-12)
            c = run["correct_per_prompt"][prompt]  # and the exact probability is what sampling measures
            assert abs(c / n - p) <= 5 * math.sqrt(p * (1 - p) / n) + 0.01, (run["method"], prompt, c, p)
        rarest = [
            p for p in prompts if p == {"R1": "0197:", "R2": "0102:", "R3": "0025:"}[run["route_roles"]["rarest"]]
        ]
        assert run["exact_pass_at_k_rarest"]["1"] == pytest.approx(run["correct_probability_per_prompt"][rarest[0]])
        shares = [run[f"route_share_{role}"] for role in ROLES]
        assert 0.0 <= sum(shares) <= 1.0 + 1e-9 and 0.0 <= run["distinct_correct"] <= 3.0
    calibration = written["calibration"]
    assert set(calibration["gates"]) == {
        "base_exactness_every_role",
        "base_exact_pass_at_256_in_range",
        "grpo_halves_rarest_share",
    }
    assert calibration["passed"] == all(calibration["gates"].values())
    verdicts = written["predictions"]
    assert set(verdicts["predictions"]) == {"P1", "P2", "P3", "P4"}
    assert set(verdicts["falsified"]) == {"F1", "F2", "F3"}
    assert verdicts["held"] == (all(verdicts["predictions"].values()) and not any(verdicts["falsified"].values()))
    printed = capsys.readouterr().out
    assert "MaxEnt minus each method, paired by seed" in printed and "calibration gates: " in printed

    # The same seeds one after the other in this process, on one torch thread as each worker ran: the same runs (seed 4
    # after seed 3 here, first in its own process there) and the same summary.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        alone = benchmark.main([*argv, "--workers", "1", "--output-dir", str(tmp_path / "one_process")])
    finally:
        torch.set_num_threads(threads)

    def without_seconds(runs: list[dict]) -> list[dict]:
        return [{k: v for k, v in run.items() if k != "seconds"} for run in runs]

    alone = json.loads(json.dumps(alone))
    assert without_seconds(alone["runs"]) == without_seconds(written["runs"])
    assert alone["summary"] == written["summary"] and alone["predictions"] == written["predictions"]
    for name in ("minority_routes.png", "minority_routes_roles.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
