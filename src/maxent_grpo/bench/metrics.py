"""The metrics a benchmark compares, read per optimizer step from a trainer's log history."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

TOKENS_PER_SECOND = "tokens_per_second"


@dataclass(frozen=True)
class Metric:
    name: str  # key in the summary JSON
    label: str  # in tables and plots
    log_key: str | None  # the trainer's log key; None for a derived metric
    description: str
    #: The equivalence margin unless ``--margin`` sets one: a number in the metric's unit, or a percentage of the
    #: baseline arm's mean (`maxent_grpo.bench.margins`).
    default_margin: str


METRICS: tuple[Metric, ...] = (
    Metric("reward", "reward", "reward", "TRL's `reward`: mean summed reward of the step's completions", "1%"),
    Metric(
        "step_time",
        "step time (s)",
        "step_time",
        "TRL's `step_time`: seconds in the optimizer step's training steps, generation included",
        "5%",
    ),
    Metric(
        TOKENS_PER_SECOND,
        "tokens/s",
        None,
        "increase of TRL's `num_tokens` (prompt + completion tokens) over the step, divided by its `step_time`",
        "5%",
    ),
    Metric(
        "completion_length",
        "completion length (tokens)",
        "completions/mean_length",
        "TRL's `completions/mean_length`",
        "1%",
    ),
    # GRPO's loss sits near 0 (advantages are centred), where a percentage of the mean means little: an absolute
    # margin, about the spread of a run's mean over seeds on the tiny recipe.
    Metric("loss", "loss", "loss", "the Trainer's `loss`", "0.01"),
)


def _finite(value: Any) -> bool:
    return value is not None and math.isfinite(float(value))


def step_series(log_history: Sequence[Mapping[str, Any]]) -> dict[str, dict[int, float]]:
    """Per metric, ``{global step: value}`` from the training log entries (those that carry ``step_time``).

    A logged value is the mean over the steps since the previous log, so tokens/s divides the growth of
    ``num_tokens`` by ``step_time`` times the number of steps the entry covers.
    """
    series: dict[str, dict[int, float]] = {metric.name: {} for metric in METRICS}
    previous_step, previous_tokens = 0, 0.0
    for entry in log_history:
        if not _finite(entry.get("step_time")):
            continue  # the end-of-training summary, evaluation entries
        step = int(entry["step"])
        for metric in METRICS:
            if metric.log_key is not None and _finite(entry.get(metric.log_key)):
                series[metric.name][step] = float(entry[metric.log_key])
        if _finite(entry.get("num_tokens")) and entry["step_time"] > 0:
            tokens, seconds = float(entry["num_tokens"]), entry["step_time"] * (step - previous_step)
            series[TOKENS_PER_SECOND][step] = (tokens - previous_tokens) / seconds
            previous_step, previous_tokens = step, tokens
    return series


def mean_after_warmup(values: Mapping[int, float], warmup_steps: int) -> float:
    """Mean of the values logged after the first ``warmup_steps`` optimizer steps."""
    kept = [value for step, value in values.items() if step > warmup_steps]
    if not kept:
        raise ValueError(f"no value was logged after the first {warmup_steps} warm-up steps.")
    return sum(kept) / len(kept)
