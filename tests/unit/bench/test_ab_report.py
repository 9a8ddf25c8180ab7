"""The A/B report from runs' log histories: each metric's method, margin and verdict in the JSON, the table and the
verdict lines."""

from __future__ import annotations

import json

import pytest

from maxent_grpo.bench.margins import margins
from maxent_grpo.bench.recipes import RECIPES
from maxent_grpo.bench.report import build_summary, markdown, verdict_lines
from maxent_grpo.bench.runner import RunResult
from maxent_grpo.bench.spec import RunSpec
from maxent_grpo.bench.stats import DIFFERS, EQUIVALENT, IDENTICAL, INCONCLUSIVE, PAIRED

HEADER = {
    "recipe": RECIPES["tiny"].to_dict(),
    "recipe_hash": "0123456789abcdef",
    "seeds": [1, 2, 3],
    "git_dirty": False,
    "package_version": "0.1.0",
    "git_commit": "abc",
    "project": "ab",
    "session": "now",
    "wall_seconds": 12.0,
}


def _run(arm: str, seed: int, reward: float, step_time: float, loss: float) -> RunResult:
    """Three logged steps (the first a warm-up) whose means after it are the given figures."""
    history = [
        {"step": step, "step_time": step_time, "num_tokens": 100.0 * step, "reward": reward,
         "completions/mean_length": 10.0 + seed, "loss": loss}
        for step in (1, 2, 3)
    ]  # fmt: skip
    spec = RunSpec(arm, seed, RECIPES["tiny"], "ab", f"{arm}-seed{seed}", {"trainer_class": f"{arm}.Trainer"})
    return RunResult(spec, history, 1.0, 2.0)


@pytest.fixture
def summary() -> dict:
    results = []
    # reward: identical seed by seed; step time: +0.1% on every seed (inside a 2% margin); loss: +0.2 (outside the
    # default 0.01); tokens/s follows step time; completion length: identical.
    for seed, (reward, step_time, loss) in enumerate([(10.0, 1.0, 0.1), (12.0, 1.2, 0.0), (11.0, 0.9, -0.1)], 1):
        results.append(_run("before", seed, reward, step_time, loss))
        results.append(_run("after", seed, reward, step_time * (1.001 + 0.0001 * seed), loss + 0.2 + 0.01 * seed))
    for seed, shift in ((1, 0.3), (2, -0.2), (3, 0.1)):
        results.append(_run("listwise", seed, 11.0 + shift, 1.0, 0.0))
    return build_summary(results, ["before", "after", "listwise"], 1, margins(["step time (s)=2%"]), HEADER)


def test_the_json_carries_method_margin_and_verdict(summary):
    summary = json.loads(json.dumps(summary))  # as written to summary.json
    assert summary["margins"]["step_time"] == "2%" and summary["margins"]["reward"] == "1%"
    reward = summary["metrics"]["reward"]["differences"]["after"]
    assert (reward["method"], reward["verdict"], reward["ci_low"], reward["ci_high"]) == (
        PAIRED,
        IDENTICAL,
        None,
        None,
    )
    assert reward["margin"] == pytest.approx(0.11)  # 1% of the baseline's mean, 11
    step_time = summary["metrics"]["step_time"]["differences"]["after"]
    assert (step_time["method"], step_time["verdict"], step_time["margin_given"]) == (PAIRED, EQUIVALENT, "2%")
    assert step_time["margin"] == pytest.approx(0.02 * (1.0 + 1.2 + 0.9) / 3)
    assert step_time["tost_low"] > -step_time["margin"] and step_time["tost_high"] < step_time["margin"]
    loss = summary["metrics"]["loss"]["differences"]["after"]
    assert (loss["verdict"], loss["margin"], loss["margin_given"]) == (DIFFERS, 0.01, "0.01")
    listwise = summary["metrics"]["reward"]["differences"]["listwise"]
    assert listwise["verdict"] == INCONCLUSIVE and listwise["seeds_needed"] > 3
    assert listwise["ci_low"] < 0.0 < listwise["ci_high"]


def test_the_verdict_lines_say_how_and_against_what(summary):
    lines = verdict_lines(summary)
    assert "reward: after - before: identical on every seed (3 paired seeds)" in lines
    (step_time,) = [line for line in lines if line.startswith("step time (s): after - before = +")]
    assert "(paired t over 3 seeds, 95% CI [" in step_time and "margin ±0.0" in step_time
    assert "(2% of before)): equivalent within ±0.0" in step_time
    assert "(a real difference, smaller than the margin)" in step_time  # +0.1% on every seed: the interval excludes 0
    (loss,) = [line for line in lines if line.startswith("loss: after - before")]
    assert loss.endswith("margin ±0.0100): differs")  # every figure with 3 significant digits
    (listwise,) = [line for line in lines if line.startswith("reward: listwise - before")]
    needed = summary["metrics"]["reward"]["differences"]["listwise"]["seeds_needed"]
    assert listwise.endswith(f"(1% of before)): inconclusive: about {needed} seeds per arm would likely decide it")


def test_the_table_has_method_margin_and_verdict_columns(summary):
    table = markdown(summary)
    assert "| Δ vs before | 95% CI of Δ | method | margin | verdict |" in table
    assert (
        "| reward | after | 3 | 11.0 ± 1.00 | [8.52, 13.5] | 0 |  | paired t | ±0.110 (1% of before) | identical on "
        in table
    )
    assert "| loss | after | 3 |" in table and "| paired t | ±0.0100 | differs |" in table
    assert "- step time (s) (margin 2%): TRL's `step_time`" in table
    assert "## Verdicts" in table and "scipy.stats.ttest_rel" in table
