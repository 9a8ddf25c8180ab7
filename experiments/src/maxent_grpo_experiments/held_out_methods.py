"""The methods of the held-out benchmarks: the base model, TRL's arms and MaxEnt, their labels and config fields.

`benchmarks/reasoning_boundary.py` and `benchmarks/multi_token_answers.py` train every arm of
`maxent_grpo_experiments.trl_baselines.ARMS` (`DEFAULT_METHODS`; `METHODS` adds the opt-in comparator ``grpo_kl``) from
the seed's supervised base model (``"base"``, reported beside them): the TRL arms with their `GRPOConfig` fields,
MaxEnt listwise with `MAXENT` and the ``--maxent`` overrides (`method_settings`), each under its label
(`method_labels`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from maxent_grpo_experiments.entropy_grid import FIXED, fixed_label
from maxent_grpo_experiments.trl_baselines import ARMS, OPT_IN_ARMS, TRL_LABELS, arm_fields, trainer_kind

__all__ = ["DEFAULT_METHODS", "LABELS", "MAXENT", "METHODS", "method_labels", "method_settings"]

#: The RL methods a run trains unless ``--methods`` says otherwise: the TRL arms, then MaxEnt.
DEFAULT_METHODS = ARMS

#: Every RL method, in the order runs are interleaved per seed (after the base model): the TRL arms (the opt-in ones
#: after the default ones), then MaxEnt.
METHODS = (*ARMS[:-1], *OPT_IN_ARMS, ARMS[-1])

#: The MaxEnt arm's fields (config defaults otherwise; ``--maxent`` adds to them).
MAXENT = {"maxent_objective": "listwise", "maxent_mode_key": "last_line"}

#: The label of every method in tables and plots, before `method_labels` names the coefficient and overrides.
LABELS = {"base": "base (supervised only)", **TRL_LABELS, "maxent": "MaxEnt listwise (defaults)"}


def method_labels(
    maxent_overrides: Sequence[tuple[str, Any]], coefficient: float | None = None, grid_size: int | None = None
) -> dict[str, str]:
    """The label of every method in tables and the plot: the fixed entropy arm's names its ``coefficient`` (chosen on
    a grid of ``grid_size``), the MaxEnt run's its overrides, if any (a field given twice shows the value that
    applies, the last)."""
    labels = dict(LABELS)
    if coefficient is not None:
        labels[FIXED] = fixed_label(coefficient, grid_size)
    if maxent_overrides:
        overrides = ", ".join(f"{name}={json.dumps(value)}" for name, value in dict(maxent_overrides).items())
        labels["maxent"] = f"MaxEnt listwise ({overrides})"
    return labels


def method_settings(method: str, coefficient: float | None, maxent: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    """The config fields ``method`` adds to the common training settings (``coefficient``: the fixed arm's).

    Raises:
        ValueError: for the fixed arm without its ``coefficient``, or a key not in `METHODS`.
    """
    if trainer_kind(method) == "maxent":
        return {**MAXENT, **dict(maxent)}
    return arm_fields(method, coefficient)
