"""Equivalence margins of the A/B benchmark's metrics: ``--margin METRIC=VALUE``, a number or a percentage.

A margin m says how large a difference between two arms may be and still not matter; the verdict is "equivalent
within ±m" when the difference's 90% interval lies inside it (`maxent_grpo.bench.stats.compare`). ``VALUE`` is in the
metric's unit (``reward=0.01``) or a percentage of the baseline arm's mean (``"step time (s)=2%"``); ``METRIC`` is a
metric's name in the JSON (``step_time``) or its label in the table (``step time (s)``). Metrics without a
``--margin`` keep their `Metric.default_margin`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from maxent_grpo.bench.metrics import METRICS

__all__ = ["Margin", "margins", "parse_margin"]


@dataclass(frozen=True)
class Margin:
    """A margin as given: ``value`` in the metric's unit, or, when ``relative``, in percent of the baseline's mean."""

    value: float
    relative: bool

    def __str__(self) -> str:
        return f"{self.value:g}%" if self.relative else f"{self.value:g}"

    def resolve(self, baseline_mean: float) -> float:
        """The margin in the metric's unit, for a baseline arm whose mean is ``baseline_mean``."""
        return self.value / 100.0 * abs(baseline_mean) if self.relative else self.value


def parse_margin(text: str) -> Margin:
    """``"0.01"`` or ``"2%"`` as a `Margin`.

    Raises:
        ValueError: when ``text`` is not a finite number >= 0, with or without a trailing ``%``.
    """
    number = text.strip()
    relative = number.endswith("%")
    try:
        value = float(number.removesuffix("%"))
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0.0):
        raise ValueError(f"{text!r} is not a margin: expected a number >= 0 or a percentage such as 2%")
    return Margin(value, relative)


def margins(items: Sequence[str]) -> dict[str, Margin]:
    """Every metric's margin: its default, replaced by the ``METRIC=VALUE`` items that name it (the last one wins).

    Raises:
        ValueError: an item without ``=``, naming no metric, or whose value `parse_margin` refuses; the message is
            one sentence.
    """
    names = {metric.name: metric.name for metric in METRICS} | {metric.label: metric.name for metric in METRICS}
    chosen = {metric.name: parse_margin(metric.default_margin) for metric in METRICS}
    for item in items:
        key, separator, value = item.rpartition("=")
        if not separator or key.strip() not in names:
            known = ", ".join(repr(metric.label) for metric in METRICS)
            raise ValueError(f"--margin {item!r}: expected METRIC=VALUE with METRIC one of {known}")
        try:
            chosen[names[key.strip()]] = parse_margin(value)
        except ValueError as error:
            raise ValueError(f"--margin {item!r}: {error}") from error
    return chosen
