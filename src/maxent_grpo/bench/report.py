"""The benchmark's summary: per-run series and means, per-arm intervals, differences and verdicts; JSON, Markdown."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from maxent_grpo.bench.metrics import METRICS, mean_after_warmup, step_series
from maxent_grpo.bench.runner import RunResult
from maxent_grpo.bench.stats import METHOD, summarize, welch_difference


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


def build_summary(
    results: Sequence[RunResult], arms: Sequence[str], warmup_steps: int, header: Mapping[str, Any]
) -> dict[str, Any]:
    """The JSON-ready summary; the first of ``arms`` is the baseline every other arm is compared with."""
    runs = [_run_record(result, warmup_steps) for result in results]
    baseline = arms[0]
    metrics: dict[str, Any] = {}
    for metric in METRICS:
        per_arm = {arm: [run["run_means"][metric.name] for run in runs if run["arm"] == arm] for arm in arms}
        differences = {}
        for arm in arms[1:]:
            difference = welch_difference(per_arm[baseline], per_arm[arm])
            differences[arm] = {"baseline": baseline, **dataclasses.asdict(difference), "verdict": difference.verdict}
        metrics[metric.name] = {
            "label": metric.label,
            "description": metric.description,
            "arms": {arm: dataclasses.asdict(summarize(values)) for arm, values in per_arm.items()},
            "differences": differences,
        }
    return {
        **header,
        "arms": list(arms),
        "baseline": baseline,
        "warmup_steps": warmup_steps,
        "method": METHOD,
        "metrics": metrics,
        "runs": runs,
    }


def _number(value: float, signed: bool = False) -> str:
    sign = "+" if signed else ""
    return f"{value:{sign}.1f}" if abs(value) >= 100 else f"{value:{sign}.4g}"


def _interval(low: float, high: float) -> str:
    return f"[{_number(low)}, {_number(high)}]"


def verdict_lines(summary: Mapping[str, Any]) -> list[str]:
    """One line per metric and compared arm, e.g. ``reward: after - before = +0.1 (95% CI [-0.5, 0.7]): ...``."""
    lines = []
    for metric in summary["metrics"].values():
        for arm, difference in metric["differences"].items():
            lines.append(
                f"{metric['label']}: {arm} - {difference['baseline']} = {_number(difference['estimate'], signed=True)}"
                f" (95% CI {_interval(difference['ci_low'], difference['ci_high'])}): {difference['verdict']}"
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
        f"| metric | arm | runs | mean ± std | 95% CI | Δ vs {baseline} | 95% CI of Δ | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for metric in summary["metrics"].values():
        for arm, stats in metric["arms"].items():
            cells = [
                metric["label"],
                arm,
                str(stats["n"]),
                f"{_number(stats['mean'])} ± {_number(stats['std'])}",
                _interval(stats["ci_low"], stats["ci_high"]),
            ]
            difference = metric["differences"].get(arm)
            if difference is None:
                cells += ["(baseline)", "", ""]
            else:
                cells += [
                    _number(difference["estimate"], signed=True),
                    _interval(difference["ci_low"], difference["ci_high"]),
                    difference["verdict"],
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
    lines += [f"- {metric['label']}: {metric['description']}" for metric in summary["metrics"].values()]
    return "\n".join(lines) + "\n"
