"""The trailing moving average the benchmarks draw and summarise their per-step reward curves with."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

__all__ = ["SMOOTHING_WINDOW", "smooth"]

#: Steps of the trailing moving average the benchmarks' reward curves are drawn with (and summarised over).
SMOOTHING_WINDOW = 10


def smooth(values: Sequence[float], window: int) -> list[float]:
    """Trailing moving average over up to ``window`` values."""
    return [statistics.fmean(values[max(0, i + 1 - window) : i + 1]) for i in range(len(values))]
