"""The benchmark's summary: per-run series and means, per-arm intervals, differences and verdicts; JSON, Markdown."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from maxent_grpo.bench.margins import Margin
from maxent_grpo.bench.metrics import METRICS, mean_after_warmup, step_series
from maxent_grpo.bench.runner import RunResult
from maxent_grpo.bench.stats import (
    EQUIVALENT,
    IDENTICAL,
    INCONCLUSIVE,
    MAX_SEEDS,
    METHOD,
    PAIRED,
    WELCH,
    Comparison,
    compare,
    summarize,
)
from maxent_grpo.number_format import figure

METHOD_NAMES = {PAIRED: "paired t", WELCH: "Welch t"}


def _run_record(result: RunResult, warmup_steps: int) -> dict[str, Any]:
    series = step_series(result.log_history)
    means = {}
    for metric in METRICS:
        try:
            means[metric.name] = mean_after_warmup(series[metric.name], warmup_steps)
        except ValueError as error:
            raise ValueError(f"run {result.spec.run_name}, metric {metric.name}: {error}") from error
    return {
        "run_name": result.spec.run_name,
        "arm": result.spec.arm,
        "seed": result.spec.seed,
        "trainer_class": result.spec.metadata["trainer_class"],
        "train_seconds": result.train_seconds,
        "process_seconds": result.process_seconds,
        "run_means": means,
        "series": {name: sorted(values.items()) for name, values in series.items()},
    }


def _difference_record(baseline: str, comparison: Comparison, margin: Margin) -> dict[str, Any]:
    record: dict[str, Any] = {
        "baseline": baseline,
        "method": comparison.method,
        "margin": comparison.margin,
        "margin_given": str(margin),
        "verdict": comparison.verdict,
        "seeds_needed": comparison.seeds_needed,
    }
    if comparison.difference is None:  # identical on every seed: no interval
        return record | {"estimate": 0.0, "ci_low": None, "ci_high": None, "tost_low": None, "tost_high": None}
    return record | dataclasses.asdict(comparison.difference)


def build_summary(
    results: Sequence[RunResult],
    arms: Sequence[str],
    warmup_steps: int,
    margins: Mapping[str, Margin],
    header: Mapping[str, Any],
) -> dict[str, Any]:
    """The JSON-ready summary; the first of ``arms`` is the baseline every other arm is compared with, each metric
    with its margin from ``margins`` (metric name -> `Margin`)."""
    runs = [_run_record(result, warmup_steps) for result in results]
    baseline = arms[0]
    metrics: dict[str, Any] = {}
    for metric in METRICS:
        per_arm = {
            arm: {run["seed"]: run["run_means"][metric.name] for run in runs if run["arm"] == arm} for arm in arms
        }
        summaries = {arm: summarize(list(values.values())) for arm, values in per_arm.items()}
        margin = margins[metric.name]
        absolute_margin = margin.resolve(summaries[baseline].mean)
        differences = {
            arm: _difference_record(baseline, compare(per_arm[baseline], per_arm[arm], absolute_margin), margin)
            for arm in arms[1:]
        }
        metrics[metric.name] = {
            "label": metric.label,
            "description": metric.description,
            "arms": {arm: dataclasses.asdict(summary) for arm, summary in summaries.items()},
            "differences": differences,
        }
    return {
        **header,
        "arms": list(arms),
        "baseline": baseline,
        "warmup_steps": warmup_steps,
        "margins": {name: str(margin) for name, margin in margins.items()},
        "method": METHOD,
        "metrics": metrics,
        "runs": runs,
    }


def _interval(low: float, high: float) -> str:
    return f"[{figure(low)}, {figure(high)}]"


def _margin(difference: Mapping[str, Any]) -> str:
    given = difference["margin_given"]
    absolute = figure(difference["margin"])
    if given.endswith("%"):
        return f"±{absolute} ({given} of {difference['baseline']})"
    return f"±{absolute}"


def verdict(difference: Mapping[str, Any]) -> str:
    """A difference's verdict in words: ``identical on every seed``, ``equivalent within ±0.250`` (noting when the 95%
    interval excludes 0 as well), ``differs`` or ``inconclusive: about 12 seeds per arm would likely decide it``."""
    if difference["verdict"] == EQUIVALENT:
        text = f"equivalent within ±{figure(difference['margin'])}"
        if not difference["ci_low"] <= 0.0 <= difference["ci_high"]:
            text += " (a real difference, smaller than the margin)"
        return text
    if difference["verdict"] == INCONCLUSIVE:
        needed = difference["seeds_needed"]
        if needed is None:
            return f"inconclusive: no number of seeds up to {MAX_SEEDS} would likely decide it"
        return f"inconclusive: about {needed} seeds per arm would likely decide it"
    return difference["verdict"]


def verdict_lines(summary: Mapping[str, Any]) -> list[str]:
    """One line per metric and compared arm, e.g. ``reward: after - before = +0.100 (paired t over 3 seeds, 95% CI
    [-0.500, 0.700], 90% CI [-0.300, 0.500], margin ±0.250 (1% of before)): inconclusive: ...``."""
    lines = []
    for metric in summary["metrics"].values():
        for arm, difference in metric["differences"].items():
            head = f"{metric['label']}: {arm} - {difference['baseline']}"
            if difference["verdict"] == IDENTICAL:
                lines.append(f"{head}: {IDENTICAL} ({len(summary['seeds'])} paired seeds)")
                continue
            lines.append(
                f"{head} = {figure(difference['estimate'], signed=True)} ({METHOD_NAMES[difference['method']]} over "
                f"{difference['n']} seeds, 95% CI {_interval(difference['ci_low'], difference['ci_high'])}, 90% CI "
                f"{_interval(difference['tost_low'], difference['tost_high'])}, margin {_margin(difference)}): "
                f"{verdict(difference)}"
            )
    return lines


def markdown(summary: Mapping[str, Any]) -> str:
    """The summary as a Markdown report: provenance, the table, the verdicts, the runs and the method."""
    baseline = summary["baseline"]
    recipe = summary["recipe"]
    dirty = {True: "yes", False: "no", None: "unknown"}[summary["git_dirty"]]
    lines = [
        f"# A/B benchmark: {' vs '.join(summary['arms'])}",
        "",
        f"Recipe `{recipe['name']}` (hash `{summary['recipe_hash'][:8]}`), {len(summary['seeds'])} seeds per arm "
        f"({', '.join(map(str, summary['seeds']))}), runs interleaved across arms; each run's metric is its mean over "
        f"the steps after the first {summary['warmup_steps']} (warm-up).",
        f"maxent-grpo {summary['package_version']}, commit `{summary['git_commit']}` "
        f"(tracked files modified since: {dirty}); trackio project `{summary['project']}`, "
        f"session `{summary['session']}`; wall time {summary['wall_seconds']:.0f} s.",
        "",
        f"| metric | arm | runs | mean ± std | 95% CI | Δ vs {baseline} | 95% CI of Δ | method | margin | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for metric in summary["metrics"].values():
        for arm, stats in metric["arms"].items():
            cells = [
                metric["label"],
                arm,
                str(stats["n"]),
                f"{figure(stats['mean'])} ± {figure(stats['std'])}",
                _interval(stats["ci_low"], stats["ci_high"]),
            ]
            difference = metric["differences"].get(arm)
            if difference is None:
                cells += ["(baseline)", "", "", "", ""]
            elif difference["verdict"] == IDENTICAL:
                cells += ["0", "", METHOD_NAMES[difference["method"]], _margin(difference), IDENTICAL]
            else:
                cells += [
                    figure(difference["estimate"], signed=True),
                    _interval(difference["ci_low"], difference["ci_high"]),
                    METHOD_NAMES[difference["method"]],
                    _margin(difference),
                    verdict(difference),
                ]
            lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Verdicts", "", *(f"- {line}" for line in verdict_lines(summary))]
    lines += ["", "## Runs", "", "| run | arm | seed | trainer | training (s) |", "|---|---|---|---|---|"]
    for run in summary["runs"]:
        lines.append(
            f"| `{run['run_name']}` | {run['arm']} | {run['seed']} | `{run['trainer_class']}` | "
            f"{run['train_seconds']:.1f} |"
        )
    lines += ["", "## Method", "", summary["method"], ""]
    lines += [
        f"- {metric['label']} (margin {summary['margins'][name]}): {metric['description']}"
        for name, metric in summary["metrics"].items()
    ]
    return "\n".join(lines) + "\n"
