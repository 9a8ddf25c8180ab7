"""TRL's entropy bonus (``entropy_coef``) at another weight than the loss it is added to, for one loss call.

TRL adds ``- coef * entropy`` inside its loss, so a factor on the returned loss scales both. The window correction
(`optimizer_window`) needs another factor for the bonus than for the policy term of dapo, cispo and vespo: the loss
is computed with the coefficient times ``ratio`` and then multiplied by the loss factor. TRL reads the coefficient
from ``trainer.entropy_coef`` and, with adaptive entropy control, moves it at a window's boundary; both the coefficient
TRL keeps and the one it logs stay the unscaled ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def scaled_entropy_bonus(trainer: Any, ratio: float) -> Iterator[None]:
    """Within the block, the entropy bonus of ``trainer`` (a `GRPOTrainer`) weighs ``ratio`` times its coefficient."""
    if ratio == 1.0 or not trainer._entropy_bonus_enabled:
        yield
        return
    args = trainer.args
    coef = trainer.entropy_coef
    metrics = trainer._metrics["train"]
    logged = len(metrics.get("entropy_coef", ()))
    trainer.entropy_coef = coef * ratio
    # TRL's adaptive control moves the coefficient at a training window's boundary: move the unscaled one alike.
    adapts = trainer.use_adaptive_entropy and trainer.model.training and trainer.accelerator.sync_gradients
    try:
        yield
    finally:
        if adapts:
            if trainer._last_world_entropy <= args.entropy_target:
                coef = min(coef + args.entropy_coef_delta, args.entropy_coef_max)
            else:
                coef = max(coef - args.entropy_coef_delta, args.entropy_coef_min)
        trainer.entropy_coef = coef
        values = metrics.get("entropy_coef", [])
        if len(values) > logged:
            values[-1] = coef
