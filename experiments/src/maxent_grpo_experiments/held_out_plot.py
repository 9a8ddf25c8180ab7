"""The figure of the held-out benchmarks: training reward per step, and held-out pass@k against k with 95% bands.

Needs matplotlib (a development extra); the scripts that draw it import it.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from maxent_grpo_experiments.smoothing import SMOOTHING_WINDOW, smooth

__all__ = ["plot_pass_at_k"]


def plot_pass_at_k(
    summary: Mapping[str, Any],
    curves: Mapping[str, Sequence[Sequence[float]]],
    labels: Mapping[str, str],
    path: Path,
    *,
    ks: Sequence[int],
    title: str,
    zoom_from: int = 16,
) -> None:
    """Write the PNG of three panels to ``path``.

    Left: training reward per step (mean over seeds, smoothed over `SMOOTHING_WINDOW` steps). Middle: held-out pass@k
    against k per method, with its 95% interval over seeds shaded (clipped to [0, 1]; none with one seed). Right: the
    same from k = ``zoom_from`` on, zoomed, where methods part.

    Args:
        summary: per method, its ``pass_at_k`` (k as a string -> mean) and ``pass_at_k_ci95``; ``"base"`` is drawn
            dashed.
        curves: per trained method, its reward curve per seed.
        labels: per method, its legend label.
        path: the PNG.
        ks: the k of the x axis.
        title: the figure's title.
        zoom_from: the first k of the right panel.
    """
    figure, (left, middle, right) = plt.subplots(1, 3, figsize=(18, 4.6))
    for method, figures in summary.items():
        shown_ks = [int(k) for k in figures["pass_at_k"]]
        values = list(figures["pass_at_k"].values())
        bands = [figures["pass_at_k_ci95"][str(k)] for k in shown_ks]
        style = "k--" if method == "base" else "-"
        for axis, shown in ((middle, shown_ks), (right, [k for k in shown_ks if k >= zoom_from])):
            picked = [i for i, k in enumerate(shown_ks) if k in shown]
            (line,) = axis.plot(shown, [values[i] for i in picked], style, marker="o", label=labels[method])
            if all(bands[i] is not None for i in picked):
                low = [max(bands[i][0], 0.0) for i in picked]
                high = [min(bands[i][1], 1.0) for i in picked]
                axis.fill_between(shown, low, high, color=line.get_color(), alpha=0.12, linewidth=0)
        if method in curves:
            by_step = list(zip(*(smooth(c, SMOOTHING_WINDOW) for c in curves[method]), strict=True))
            left.plot(range(1, len(by_step) + 1), [statistics.fmean(v) for v in by_step], label=labels[method])
    left.set(title="training reward (mean of the step's groups)", xlabel="step")
    middle.set(title="held-out pass@k (mean over seeds, 95% interval)", xlabel="k", xscale="log", ylim=(-0.02, 1.02))
    right.set(title=f"held-out pass@k from k = {zoom_from} (zoomed)", xlabel="k", xscale="log")
    for axis in (middle, right):
        axis.minorticks_off()
    middle.set_xticks(list(ks), [str(k) for k in ks])
    right.set_xticks([k for k in ks if k >= zoom_from], [str(k) for k in ks if k >= zoom_from])
    for axis in (left, middle, right):
        axis.grid(alpha=0.3)
        axis.legend(loc="lower right", fontsize="small")
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)
