"""A PNG of each benchmark metric over optimizer steps: per arm, the mean across seeds with a ± std band.

matplotlib comes with the ``bench`` extra (`maxent_grpo.bench.extra`) and is imported when the plot is drawn.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

COLUMNS = 3
LINE_STYLES = ("-", "--", ":")  # arms whose curves coincide stay visible


def _band(runs: list[Mapping[str, Any]], metric: str) -> tuple[list[int], list[float], list[float]]:
    by_step: dict[int, list[float]] = {}
    for run in runs:
        for step, value in run["series"][metric]:
            by_step.setdefault(step, []).append(value)
    steps = sorted(by_step)
    means = [statistics.fmean(by_step[step]) for step in steps]
    stds = [statistics.stdev(by_step[step]) if len(by_step[step]) > 1 else 0.0 for step in steps]
    return steps, means, stds


def plot_metrics(summary: Mapping[str, Any], path: Path) -> None:
    """Write one panel per metric to ``path``; the dotted line marks the end of the warm-up steps."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    metrics = summary["metrics"]
    rows = math.ceil(len(metrics) / COLUMNS)
    figure = Figure(figsize=(5 * COLUMNS, 3.6 * rows), layout="constrained")
    axes = figure.subplots(rows, COLUMNS, squeeze=False).flatten()
    for axis, (name, metric) in zip(axes, metrics.items(), strict=False):
        for index, arm in enumerate(summary["arms"]):
            steps, means, stds = _band([run for run in summary["runs"] if run["arm"] == arm], name)
            (line,) = axis.plot(steps, means, LINE_STYLES[index % len(LINE_STYLES)], label=arm)
            low = [mean - std for mean, std in zip(means, stds, strict=True)]
            high = [mean + std for mean, std in zip(means, stds, strict=True)]
            axis.fill_between(steps, low, high, color=line.get_color(), alpha=0.25, linewidth=0)
        axis.axvline(summary["warmup_steps"] + 0.5, color="grey", linestyle=":", linewidth=1)
        axis.set_title(metric["label"])
        axis.set_xlabel("optimizer step")
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.legend(fontsize="small")
    for axis in axes[len(metrics) :]:
        axis.set_visible(False)
    figure.suptitle(
        f"{' vs '.join(summary['arms'])}: recipe {summary['recipe']['name']} ({summary['recipe_hash'][:8]}), "
        f"mean ± std over {len(summary['seeds'])} seeds"
    )
    figure.savefig(path, dpi=100)
