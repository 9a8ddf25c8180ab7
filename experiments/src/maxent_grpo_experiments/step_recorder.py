"""A reward function wrapper that records every group the trainer scores: the benchmarks' per-step curves."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["StepRecorder"]


class StepRecorder:
    """Reward function wrapper that records, for every scored group, the mean reward and each of ``group_metrics``.

    ``group_metrics`` maps a name to a function of the group's completions; its values land in ``metrics[name]``.
    """

    def __init__(
        self,
        reward_func: Callable[..., list[float]],
        group_metrics: Mapping[str, Callable[[list], float]] | None = None,
    ) -> None:
        self.reward_func = reward_func
        self.__name__ = reward_func.__name__
        self.group_metrics = dict(group_metrics or {})
        self.rewards: list[float] = []
        self.metrics: dict[str, list[float]] = {name: [] for name in self.group_metrics}

    def __call__(self, completions: list, **kwargs: Any) -> list[float]:
        rewards = self.reward_func(completions=completions, **kwargs)
        self.rewards.append(statistics.fmean(rewards))
        for name, metric in self.group_metrics.items():
            self.metrics[name].append(metric(completions))
        return rewards
