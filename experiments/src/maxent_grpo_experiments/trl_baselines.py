"""TRL's own answers to collapse, as the baselines every objective benchmark runs beside stock GRPO and MaxEnt.

A TRL user who sees GRPO collapse onto one answer has one-line options before reaching for another trainer:
a token-entropy bonus (``entropy_coef``, fixed or adaptive) and training only on the most uncertain tokens
(``top_entropy_quantile``). A benchmark that compares MaxEnt with stock GRPO alone overstates it, so every objective
benchmark runs the arms named here, under method keys that start with ``grpo_`` (one JSON reader serves them all):

- ``grpo``: stock TRL `GRPOTrainer`;
- ``grpo_entropy_fixed``: a fixed bonus, ``entropy_coef`` = the best coefficient of `FIXED_ENTROPY_GRID` on the
  seeds the benchmark chooses settings on (`choose_fixed_coefficient`; the whole grid is reported with its figures);
- ``grpo_entropy``: TRL's adaptive bonus (`ADAPTIVE_ENTROPY`);
- ``grpo_top_entropy``: the loss on the top 20% tokens by entropy (`TOP_ENTROPY`).

The benchmark's own MaxEnt arm (``maxent``) comes last: `ARMS` lists every arm in the order runs are interleaved per
seed, and `arm_fields` gives the `GRPOConfig` fields each adds to the benchmark's settings.

One more TRL arm runs only when a held-out benchmark asks for it (``--methods ... grpo_kl``): ``grpo_kl``, GRPO with
TRL's KL penalty to the reference model (`KL_ANCHOR`). It is no answer to collapse but the comparator of a MaxEnt run
that anchors to its base the same way (``--maxent beta=0.3``): without it, what the KL does would pass for what MaxEnt
does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from maxent_grpo.cpu_trainer import TRAINERS

#: How far below stock GRPO's mean reward a grid coefficient may end and still be chosen (the default ``tolerance`` of
#: `choose_fixed_coefficient`); also the reward margin the single-prompt benchmarks compare MaxEnt with.
REWARD_TOLERANCE = 0.01

#: Fixed ``entropy_coef`` values tried for the ``grpo_entropy_fixed`` arm (TRL's default is 0.0: no bonus).
FIXED_ENTROPY_GRID: tuple[float, ...] = (0.01, 0.02, 0.05, 0.1)

#: TRL's adaptive entropy bonus, which starts at 0.01 and moves by TRL's default delta toward a token entropy of 1.0,
#: capped at 0.1.
ADAPTIVE_ENTROPY: dict[str, Any] = {
    "entropy_coef": 0.01,
    "use_adaptive_entropy": True,
    "entropy_target": 1.0,
    "entropy_coef_max": 0.1,
}

#: TRL's top-entropy token selection, the policy loss on the 20% of completion tokens with the highest entropy.
TOP_ENTROPY: dict[str, Any] = {"top_entropy_quantile": 0.2}

#: TRL's KL penalty to the reference model (the base a run starts from), at the strongest anchor the MaxEnt objective
#: search tried (`benchmarks/multi_token_answers.py`); the ``grpo_kl`` arm.
KL_ANCHOR: dict[str, Any] = {"beta": 0.3}

#: Labels of the TRL arms for tables and plots.
TRL_LABELS: dict[str, str] = {
    "grpo": "GRPO (stock TRL)",
    "grpo_entropy_fixed": "GRPO + entropy_coef (fixed, best of grid)",
    "grpo_entropy": "GRPO + adaptive entropy_coef",
    "grpo_top_entropy": "GRPO + top_entropy_quantile=0.2",
    "grpo_kl": "GRPO + beta=0.3 (KL to the base)",
}


def fixed_entropy(coefficient: float) -> dict[str, Any]:
    """The `GRPOConfig` fields of a fixed token-entropy bonus of weight ``coefficient`` (> 0)."""
    if not coefficient > 0:
        raise ValueError(f"a fixed entropy bonus needs entropy_coef > 0, got {coefficient}")
    return {"entropy_coef": float(coefficient)}


def trl_methods(fixed_coefficient: float) -> dict[str, dict[str, Any]]:
    """The TRL arms, in run order, each with the `GRPOConfig` fields it adds to the benchmark's GRPO settings;
    ``grpo_entropy_fixed`` uses ``fixed_coefficient`` (see `choose_fixed_coefficient`)."""
    return {
        "grpo": {},
        "grpo_entropy_fixed": fixed_entropy(fixed_coefficient),
        "grpo_entropy": dict(ADAPTIVE_ENTROPY),
        "grpo_top_entropy": dict(TOP_ENTROPY),
    }


#: Every arm of the objective benchmarks, in the order runs are interleaved per seed: the TRL arms of `trl_methods`,
#: then MaxEnt listwise.
ARMS: tuple[str, ...] = ("grpo", "grpo_entropy_fixed", "grpo_entropy", "grpo_top_entropy", "maxent")

#: The arms a held-out benchmark runs only when ``--methods`` names them.
OPT_IN_ARMS: tuple[str, ...] = ("grpo_kl",)


def arm_fields(method: str, fixed_coefficient: float | None = None) -> dict[str, Any]:
    """The `GRPOConfig` fields an arm of `ARMS` or `OPT_IN_ARMS` adds to the benchmark's settings (none for ``grpo``
    and ``maxent``).

    Args:
        method: the arm's key.
        fixed_coefficient: the ``entropy_coef`` of ``grpo_entropy_fixed``, required for it and ignored by the others.

    Raises:
        ValueError: for a key in neither, or ``grpo_entropy_fixed`` without a ``fixed_coefficient`` > 0.
    """
    if method not in ARMS + OPT_IN_ARMS:
        raise ValueError(f"unknown arm {method!r}: expected one of {', '.join(ARMS + OPT_IN_ARMS)}")
    if method == "maxent":
        return {}
    if method == "grpo_kl":
        return dict(KL_ANCHOR)
    if method == "grpo_entropy_fixed":
        if fixed_coefficient is None:
            raise ValueError("grpo_entropy_fixed needs its fixed coefficient (entropy_coef)")
        return fixed_entropy(fixed_coefficient)
    return trl_methods(FIXED_ENTROPY_GRID[0])[method]  # the other TRL arms do not depend on the coefficient


def trainer_kind(method: str) -> str:
    """The trainer of an arm's key (`maxent_grpo.cpu_trainer.TRAINERS`): ``"maxent"`` for ``"maxent"``, ``"grpo"``
    for ``"grpo"`` and every ``grpo_`` key.

    Raises:
        ValueError: for any other key.
    """
    if method in TRAINERS:
        return method
    if method.startswith("grpo_"):
        return "grpo"
    raise ValueError(f"unknown method {method!r}: expected 'maxent', 'grpo' or a 'grpo_' key")


def admissible(reward: float, grpo_reward: float, tolerance: float = REWARD_TOLERANCE) -> bool:
    """Whether a coefficient whose mean reward is ``reward`` may be chosen: at most ``tolerance`` below stock GRPO's
    (``grpo_reward``), the rule of `choose_fixed_coefficient`."""
    return reward >= grpo_reward - tolerance


def choose_fixed_coefficient(
    diversity: Mapping[float, float],
    reward: Mapping[float, float],
    grpo_reward: float,
    tolerance: float = REWARD_TOLERANCE,
) -> float:
    """The grid's best fixed ``entropy_coef``, judged as a TRL user tuning it would: the coefficient with the
    highest ``diversity`` (the benchmark's own diversity figure, mean over the selection seeds) among those whose
    mean ``reward`` is at most ``tolerance`` below stock GRPO's (``grpo_reward``); when none is, the one with the
    highest reward. Ties go to the smaller coefficient.

    Raises:
        ValueError: when the grid is empty or ``diversity`` and ``reward`` name different coefficients.
    """
    if not diversity or set(diversity) != set(reward):
        raise ValueError(f"diversity and reward must name the same non-empty grid, got {sorted(diversity)} and "
                         f"{sorted(reward)}")  # fmt: skip
    grid = sorted(diversity)
    candidates = [c for c in grid if admissible(reward[c], grpo_reward, tolerance)]
    if not candidates:
        return max(grid, key=lambda c: (reward[c], -c))
    return max(candidates, key=lambda c: (diversity[c], -c))
