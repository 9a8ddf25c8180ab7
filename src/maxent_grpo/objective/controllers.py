"""The tau and beta controllers of the listwise objective, and the tau anneal.

Pure Python: each controller holds one number, updated from one measurement per rollout batch, and a JSON state that
travels with checkpoints.
"""

from __future__ import annotations

import math
import sys

from maxent_grpo.objective.value_checks import check_finite, fail, is_count, is_number

__all__ = ["BetaController", "TauController", "annealed_tau"]


def annealed_tau(tau_start: float, tau_final: float, progress: float) -> float:
    """``tau`` annealed geometrically: ``tau_start * (tau_final / tau_start) ** progress``, progress clipped to [0, 1].

    Deterministic annealing (Rose, "Deterministic annealing for clustering, compression, classification, regression,
    and related optimization problems", Proc. IEEE 1998): a high early temperature keeps weight on many answers, so
    the policy goes on sampling (and finding) other correct answers; the low final one puts the target's weight on the
    best answers, so the reward converges. A geometric path spends equal time per factor of ``tau``.
    """
    check_finite("tau_start", tau_start, low=0.0, strict=True)
    check_finite("tau_final", tau_final, low=0.0, strict=True)
    check_finite("progress", progress)
    return tau_start * (tau_final / tau_start) ** min(max(progress, 0.0), 1.0)


class TauController:
    """Steers ``tau`` in log space so that the mean weight entropy tracks ``target_entropy``.

    Each [`update`] folds the measured mean weight entropy into an exponential moving average (the first
    measurement initialises it), counts the step and, once more than ``warmup_steps`` steps have been seen, moves
    ``log tau += lr * (target_entropy - ema)``: too little entropy raises ``tau`` (spreads the weights), too much
    lowers it. ``tau`` is then clamped to ``[tau_min, tau_max]``. With ``target_entropy=None`` ``tau`` never changes
    (steps and the average are still tracked).

    Args:
        tau: initial temperature; ``> 0`` and within ``[tau_min, tau_max]`` when ``target_entropy`` is set, any
            finite number ``>= 0`` otherwise.
        target_entropy: target mean weight entropy in nats (``>= 0``), or None for a fixed ``tau``.
        lr: step size ``> 0`` of the log-tau update.
        tau_min: lower clamp, finite ``>= 0``.
        tau_max: upper clamp, finite ``>= tau_min``.
        warmup_steps: number of first updates that only feed the average, ``>= 0``.
        ema: smoothing factor of the moving average, in ``[0, 1)`` (0: use the latest measurement).
    """

    def __init__(
        self,
        tau: float,
        target_entropy: float | None,
        lr: float,
        tau_min: float,
        tau_max: float,
        warmup_steps: int,
        ema: float = 0.9,
    ) -> None:
        check_finite("tau", tau, low=0.0)
        if target_entropy is not None:
            check_finite("target_entropy", target_entropy, low=0.0)
        check_finite("lr", lr, low=0.0, strict=True)
        check_finite("tau_min", tau_min, low=0.0)
        check_finite("tau_max", tau_max, low=tau_min, low_name="tau_min")
        if not is_count(warmup_steps, 0):
            fail("warmup_steps", warmup_steps, "an integer >= 0")
        if not (is_number(ema) and 0 <= ema < 1):
            fail("ema", ema, "a number in [0, 1)")
        if target_entropy is not None and not (tau > 0 and tau_min <= tau <= tau_max):
            fail("tau", tau, f"a number > 0 in [tau_min, tau_max] = [{tau_min}, {tau_max}] when target_entropy is set")
        self.tau = float(tau)
        self.target_entropy = None if target_entropy is None else float(target_entropy)
        self.lr = float(lr)
        self.tau_min = float(tau_min)
        self.tau_max = float(tau_max)
        self.warmup_steps = int(warmup_steps)
        self.ema = float(ema)
        self.ema_entropy: float | None = None
        self.step = 0

    def update(self, measured_entropy: float) -> float:
        """Record one measured mean weight entropy (nats, finite) and return the new ``tau``."""
        check_finite("measured_entropy", measured_entropy)
        measured = float(measured_entropy)
        if self.ema_entropy is None:
            self.ema_entropy = measured
        else:
            self.ema_entropy = self.ema * self.ema_entropy + (1.0 - self.ema) * measured
        self.step += 1
        if self.target_entropy is not None and self.step > self.warmup_steps:
            log_tau = math.log(self.tau) + self.lr * (self.target_entropy - self.ema_entropy)
            # The floor keeps tau > 0 (log tau defined) should exp underflow when tau_min is 0.
            self.tau = min(max(math.exp(log_tau), self.tau_min, sys.float_info.min), self.tau_max)
        return self.tau

    def state_dict(self) -> dict[str, float | int | None]:
        """JSON-serialisable state: current ``tau``, moving average and step count."""
        return {"tau": self.tau, "ema_entropy": self.ema_entropy, "step": self.step}

    def load_state_dict(self, state: dict[str, float | int | None]) -> None:
        """Restore the state saved by [`state_dict`]."""
        tau, ema_entropy, step = state["tau"], state["ema_entropy"], state["step"]
        check_finite("state['tau']", tau, low=0.0)
        if ema_entropy is not None:
            check_finite("state['ema_entropy']", ema_entropy)
        if not is_count(step, 0):
            fail("state['step']", step, "an integer >= 0")
        self.tau = float(tau)
        self.ema_entropy = None if ema_entropy is None else float(ema_entropy)
        self.step = int(step)


class BetaController:
    """Adaptive KL coefficient (Ziegler et al. 2019, "Fine-Tuning Language Models from Human Preferences").

    Each [`update`] applies ``err = clip(kl / kl_target - 1, -step_size, step_size)`` and
    ``beta <- beta * (1 + err * n_steps / horizon)``: ``beta`` grows while the measured KL is above target and
    shrinks while it is below. With ``kl_target=None`` ``beta`` stays fixed.

    Args:
        beta: initial coefficient, finite ``>= 0``; ``> 0`` when ``kl_target`` is set (the rule is multiplicative).
        kl_target: target KL (``> 0``), or None for a fixed ``beta``.
        horizon: horizon of the rule in steps, ``> 0``.
        step_size: clip of the proportional error, in ``(0, 1]``.
    """

    def __init__(self, beta: float, kl_target: float | None, horizon: float, step_size: float = 0.2) -> None:
        check_finite("beta", beta, low=0.0)
        if kl_target is not None:
            check_finite("kl_target", kl_target, low=0.0, strict=True)
            if beta == 0:
                fail("beta", beta, "a number > 0 when kl_target is set (the controller scales beta)")
        check_finite("horizon", horizon, low=0.0, strict=True)
        if not (is_number(step_size) and 0 < step_size <= 1):
            fail("step_size", step_size, "a number in (0, 1]")
        self.beta = float(beta)
        self.kl_target = None if kl_target is None else float(kl_target)
        self.horizon = float(horizon)
        self.step_size = float(step_size)

    def update(self, measured_kl: float, n_steps: int = 1) -> float:
        """Record the measured KL (finite) over the last ``n_steps >= 1`` steps and return the new ``beta``.

        ``beta`` never goes below 0 (reachable only when ``n_steps * step_size > horizon``).
        """
        check_finite("measured_kl", measured_kl)
        if not is_count(n_steps, 1):
            fail("n_steps", n_steps, "an integer >= 1")
        if self.kl_target is None:
            return self.beta
        error = min(max(float(measured_kl) / self.kl_target - 1.0, -self.step_size), self.step_size)
        self.beta = max(0.0, self.beta * (1.0 + error * n_steps / self.horizon))
        return self.beta

    def state_dict(self) -> dict[str, float]:
        """JSON-serialisable state: the current ``beta``."""
        return {"beta": self.beta}

    def load_state_dict(self, state: dict[str, float]) -> None:
        """Restore the state saved by [`state_dict`]."""
        check_finite("state['beta']", state["beta"], low=0.0)
        self.beta = float(state["beta"])
