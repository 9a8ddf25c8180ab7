"""Smoke test of the reasoning-boundary benchmark: its reward and evaluation, and a few steps end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from maxent_grpo.bench.stats import summarize, welch_difference
from maxent_grpo_experiments.digit_sums import is_correct
from maxent_grpo_experiments.held_out_methods import LABELS, method_labels
from maxent_grpo_experiments.over_seeds import format_difference, interval, paired_differences
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
    assert figures["correct_per_prompt"] == {"12=": 256, "99=": 0}  # no answer to "99=" is right


def test_paired_differences_pair_runs_by_seed() -> None:
    benchmark = load_benchmark("reasoning_boundary")

    def run(method: str, seed: int, value: float) -> dict:
        return {"method": method, "seed": seed, "pass_at_k": {str(k): value + k / 1000 for k in benchmark.KS}}

    # Seed 1 is the lucky one for every method: pairing sees the constant gap, an unpaired interval would not.
    runs = [run("base", 0, 0.2), run("maxent", 1, 0.9), run("grpo", 0, 0.1), run("base", 1, 0.6)]
    runs += [run("maxent", 0, 0.5), run("grpo", 1, 0.5), run("base", 2, 0.3), run("maxent", 2, 0.7)]
    runs += [run("grpo", 2, 0.2)]
    differences = paired_differences(runs, "maxent", "pass_at_k")
    assert list(differences) == ["base", "grpo"]
    for k in benchmark.KS:
        assert differences["base"][str(k)]["mean"] == pytest.approx(0.3333333)
        versus_grpo = summarize([0.4, 0.4, 0.5])
        assert differences["grpo"][str(k)]["mean"] == pytest.approx(versus_grpo.mean)
        assert differences["grpo"][str(k)]["ci95"] == pytest.approx([versus_grpo.ci_low, versus_grpo.ci_high])
    # The gap is told apart from zero only because it is paired: unpaired, the seeds' luck hides it.
    assert differences["grpo"]["1"]["ci95"][0] > 0.0
    assert welch_difference([0.101, 0.501, 0.201], [0.501, 0.901, 0.701]).verdict == "within run-to-run variance"
    one_seed = paired_differences([run("maxent", 0, 0.5), run("base", 0, 0.25)], "maxent", "pass_at_k")
    assert one_seed == {"base": {str(k): {"mean": pytest.approx(0.25), "ci95": None} for k in benchmark.KS}}
    assert interval([0.5]) is None
    three = summarize([0.2, 0.4, 0.9])
    assert interval([0.2, 0.4, 0.9]) == pytest.approx([three.ci_low, three.ci_high])
    assert format_difference({"mean": 0.0123, "ci95": [-0.004, 0.0286]}) == "+0.012 [-0.004, +0.029]"
    assert format_difference({"mean": -0.5, "ci95": None}) == "-0.500"


def test_the_maxent_label_names_its_overrides() -> None:
    assert method_labels([])["maxent"] == "MaxEnt listwise (defaults)"
    labels = method_labels([("top_entropy_quantile", 0.6), ("maxent_mode_key", None)])
    assert labels["maxent"] == "MaxEnt listwise (top_entropy_quantile=0.6, maxent_mode_key=null)"
    assert labels["grpo"] == LABELS["grpo"]
    assert method_labels([], 0.05)["grpo_entropy_fixed"] == "GRPO + entropy_coef=0.05 (fixed, best of grid)"
    repeated = method_labels([("maxent_tau", 0.5), ("maxent_tau", 0.3)])  # the last value applies
    assert repeated["maxent"] == "MaxEnt listwise (maxent_tau=0.3)"
    method_labels([])["maxent"] = "changed"
    assert LABELS["maxent"] == "MaxEnt listwise (defaults)"


@pytest.mark.slow
def test_exact_pass_at_k_is_what_sampling_measures() -> None:
    setup = load_benchmark("reasoning_boundary").SETUP
    tokenizer = setup.tokenizer()
    model = setup.pretrain_base(tokenizer, seed=0)  # far from uniform: a probability read one position off shows
    prompts = ["12=", "47=", "99="]
    n = 20000
    probabilities = setup.correct_probabilities(model, tokenizer, prompts)
    samples = setup.sample(model, tokenizer, prompts, n, seed=0)
    for prompt, p, group in zip(prompts, probabilities, samples, strict=True):
        frequency = sum(is_correct(prompt, answer) for answer in group) / n
        assert abs(frequency - p) <= 4 * math.sqrt(p * (1 - p) / n) + 1e-3, (prompt, frequency, p)
    assert max(probabilities) > 0.3 and min(probabilities) < 0.1  # the prompts differ: the check is not vacuous

    exact = setup.exact_pass_at_k([0.5, 0.0])
    assert exact["1"] == pytest.approx(0.25)
    assert exact["4"] == pytest.approx((1 - 0.5**4) / 2)


def assert_pass_at_k_over_seeds(summary: dict, seeds: int) -> None:
    """Every method's sampled and exact pass@k of a held-out benchmark's summary: one value per k of 1, 4, ..., 256,
    increasing in k within [0, 1], each the mean of its ``seeds`` per-seed values, with their 95% interval."""
    for method, figures in summary.items():
        for key in ("pass_at_k", "exact_pass_at_k"):
            assert list(figures[key]) == ["1", "4", "16", "64", "256"], method
            values = list(figures[key].values())
            assert values == sorted(values) and 0.0 <= values[0] <= values[-1] <= 1.0
            for k, per_seed in figures[f"{key}_per_seed"].items():
                over = summarize(per_seed)
                assert len(per_seed) == seeds and figures[key][k] == pytest.approx(over.mean)
                assert figures[f"{key}_ci95"][k] == pytest.approx([over.ci_low, over.ci_high])


@pytest.mark.slow
def test_benchmark_runs_and_writes_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    benchmark = load_benchmark("reasoning_boundary")
    argv = ["--seeds", "2", "--first-seed", "3", "--steps", "2", "--prompts-per-step", "2", "--samples", "256"]
    argv += ["--methods", "grpo", "maxent", "--maxent", "maxent_tau=0.5", "--output-dir", str(tmp_path)]
    result = benchmark.main(argv)

    written = json.loads((tmp_path / "reasoning_boundary.json").read_text())
    assert written == json.loads(json.dumps(result))
    order = [(method, seed) for seed in (3, 4) for method in ("base", "grpo", "maxent")]
    assert [(run["method"], run["seed"]) for run in written["runs"]] == order
    assert written["settings"]["maxent_overrides"] == {"maxent_tau": 0.5}
    assert written["entropy_grid"] is None  # the fixed entropy arm did not run
    assert list(written["maxent_minus"]) == [
        "pass_at_k",
        "exact_pass_at_k",
        "distinct_correct",
        "final_training_reward",
    ]
    assert (written["settings"]["seeds"], written["settings"]["first_seed"]) == (2, 3)
    assert_pass_at_k_over_seeds(written["summary"], seeds=2)
    by_seed = {(run["method"], run["seed"]): run for run in written["runs"]}
    assert list(written["maxent_minus"]["final_training_reward"]) == ["grpo"]
    for key in ("pass_at_k", "exact_pass_at_k", "distinct_correct"):
        assert list(written["maxent_minus"][key]) == ["base", "grpo"]
    for key in ("pass_at_k", "exact_pass_at_k"):
        for k, difference in written["maxent_minus"][key]["grpo"].items():
            paired = summarize([by_seed["maxent", s][key][k] - by_seed["grpo", s][key][k] for s in (3, 4)])
            assert difference["mean"] == pytest.approx(paired.mean)
            assert difference["ci95"] == pytest.approx([paired.ci_low, paired.ci_high])
    for run in written["runs"]:
        assert list(run["correct_per_prompt"]) == list(run["correct_probability_per_prompt"])
        assert list(run["correct_per_prompt"]) == written["settings"]["heldout_prompts"]
    assert len(written["reward_curves_mean_over_seeds"]["maxent"]) == 2
    printed = capsys.readouterr().out
    assert "MaxEnt listwise (maxent_tau=0.5)" in printed and "(defaults)" not in printed
    assert "MaxEnt minus each method, paired by seed" in printed
    png = tmp_path / "reasoning_boundary.png"  # drawn with the 95% bands: two seeds give intervals
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
