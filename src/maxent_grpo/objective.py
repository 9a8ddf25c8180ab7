r"""Maximum-entropy listwise weights and advantages, and the tau / beta controllers.

Pure torch, no trainer dependency. Every function works on a batch of prompt groups at once, laid out as
``[num_groups, G]`` tensors (G candidates per prompt); there is no Python loop over groups or candidates.

Candidate form. For one group with rewards :math:`r_i` and, when :math:`\beta > 0`, the length-normalised
reference log-prob :math:`\ell_i` of each candidate:

.. math::

    q_i = (1 - \varepsilon)\,\mathrm{softmax}(r / T_q)_i + \varepsilon / G          \qquad (1)

    w_i = \mathrm{softmax}\!\Big(\frac{\log q + \beta \ell}{\tau + \beta}\Big)_i     \qquad (2)

    A_i = G\,w_i - 1                                                                 \qquad (3)

Equation (2) is the closed-form maximiser over the simplex of
:math:`\sum_i w_i \log q_i + \tau H(w) - \beta\,\mathrm{KL}(w \| \pi_{ref})` with :math:`\pi_{ref} \propto e^{\ell}`,
and (3) makes the advantages zero-mean within each group.

Mode form. With a mode id per candidate (ids local to each group, ``0 .. M-1``), the entropy acts on the group's
distinct answers: (1)-(2) are applied over the :math:`M_g` modes present in the group, using each mode's mean
reward :math:`\bar r_m` and mean :math:`\bar\ell_m` (and :math:`\varepsilon / M_g` instead of :math:`\varepsilon / G`),
which gives mode weights :math:`W_m`; each candidate then gets

.. math::

    w_i = W_{m(i)} / n_{m(i)}                                                         \qquad (4)

where :math:`n_m` counts the candidates of mode :math:`m`. A correct answer sampled once therefore weighs as
much as one sampled ten times, and a mode key that puts every candidate in its own mode gives back (1)-(3).

Importance-corrected mode form. The group is a sample of the sampling policy :math:`\pi`, and (4) treats the share
:math:`n_m / G` of a mode in the group as its probability under :math:`\pi`. Given instead an estimate
:math:`\hat p_m` of that probability (``mode_log_prob``), the mode weights become the self-normalised importance
weights of the target over the group:

.. math::

    W_m \propto W^{(1-2)}_m \, \frac{n_m / G_v}{\hat p_m}                                       \qquad (5)

where :math:`W^{(1-2)}_m` are the mode weights of (1)-(2); :math:`\hat p_m = n_m / G_v` gives back (4). A mode
the policy has nearly lost (say :math:`\hat p_m = 0.003`) that turns up once in a group of 16 is over-represented
20-fold and gets that much more of the target, so it is pulled back up while it is still sampled at all; with (4)
it would get the weight of a mode that holds 1/16 of the policy. With :math:`\tau > 0` the correction applies to
every mode, wrong ones included (a rare wrong answer is explored, not only penalised); with :math:`\tau = 0` it
acts among the best modes only.

Validity. Candidates marked invalid (dropped rows), or whose reward is not finite, or whose reference term is
not finite while :math:`\beta > 0`, or whose ``mode_log_prob`` is not finite, get weight 0 and advantage 0; the
others are normalised among themselves, with :math:`G` replaced by the number of valid candidates :math:`G_v` in
(1), (3) and (5). A group with no valid candidate gets all-zero weights and advantages.

Limits. :math:`\tau \to \infty` gives uniform weights (zero advantages; with (5), the weights that undo the
group's sampling); :math:`\tau + \beta = 0` (that is
:math:`\tau = 0, \beta = 0`) is computed exactly as the limit :math:`\tau \to 0`: the weight is shared equally by the
candidates (or modes) with the highest reward. All arithmetic is done in float64 (float32 on Apple MPS, which has
no float64) in log space (``log_softmax``, ``logaddexp``), so results are finite for rewards of any sign and scale.
"""

from __future__ import annotations

import math
import numbers
import sys
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "BetaController",
    "ListwiseResult",
    "TauController",
    "annealed_tau",
    "compute_listwise",
    "listwise_advantages",
    "listwise_weights",
    "weight_entropy",
]


def _fail(name: str, value: Any, allowed: str) -> None:
    raise ValueError(f"{name}={value!r} is invalid: expected {allowed}.")


def _is_number(value: Any) -> bool:
    """A real, non-NaN Python or NumPy scalar (bools excluded)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and not math.isnan(value)


def _is_count(value: Any, low: int) -> bool:
    """An integer ``>= low`` (bools excluded)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= low


def _check_finite(
    name: str, value: Any, *, low: float | None = None, strict: bool = False, low_name: str = ""
) -> None:
    """Raise unless ``value`` is a finite number, and ``> low`` (``strict``) or ``>= low`` when ``low`` is given."""
    ok = _is_number(value) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if strict else value >= low
    if not ok:
        bound = "" if low is None else f" {'>' if strict else '>='} {low_name + ' = ' if low_name else ''}{low}"
        _fail(name, value, f"a finite number{bound}")


@dataclass(frozen=True)
class ListwiseResult:
    """Listwise targets of a batch of prompt groups.

    Attributes:
        weights: ``[num_groups, G]`` candidate weights ``w_i``; each row sums to 1 over its valid entries (0 for a
            group with no valid candidate), invalid entries are 0.
        advantages: ``[num_groups, G]`` advantages ``G_v * w_i - 1`` on valid entries, 0 on invalid ones.
        entropy: ``[num_groups]`` Shannon entropy (nats) of the distribution the entropy term acts on: the mode
            weights ``W_m`` of (1)-(2) when mode ids are given (before the correction (5)), the candidate weights
            ``w_i`` otherwise. 0 for a group with
            no valid candidate; average over ``valid.any(-1)`` to report a batch mean.
    """

    weights: torch.Tensor  # [num_groups, G]
    advantages: torch.Tensor  # [num_groups, G]
    entropy: torch.Tensor  # [num_groups]


def _masked_log_softmax(logits: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Row-wise log-softmax over the valid entries; -inf elsewhere (rows with no valid entry are all -inf)."""
    any_valid = valid.any(dim=-1, keepdim=True)
    masked = torch.where(valid, logits, -math.inf)
    masked = torch.where(any_valid, masked, 0.0)
    return torch.where(valid, torch.log_softmax(masked, dim=-1), -math.inf)


def _maxent_log_weights(
    rewards: torch.Tensor,
    ref_term: torch.Tensor | None,
    valid: torch.Tensor,
    *,
    tau: float,
    q_temperature: float,
    q_epsilon: float,
    beta: float,
) -> torch.Tensor:
    """Log of equations (1)-(2) row-wise over the valid entries of ``[rows, K]`` tensors; invalid entries get -inf."""
    count = valid.sum(dim=-1, keepdim=True).clamp_min(1).to(rewards.dtype)
    log_p = _masked_log_softmax(rewards / q_temperature, valid)
    log_keep = math.log1p(-q_epsilon)
    log_smooth = (math.log(q_epsilon) if q_epsilon > 0 else -math.inf) - torch.log(count)
    log_q = torch.logaddexp(log_p + log_keep, log_smooth)
    numerator = log_q if ref_term is None else log_q + beta * ref_term
    # Shift so the best valid entry is exactly 0: dividing by a tiny temperature then cannot overflow it.
    best = numerator.masked_fill(~valid, -math.inf).amax(dim=-1, keepdim=True)
    shifted = torch.where(valid, numerator - best, -math.inf)
    temperature = tau + beta
    if temperature == 0:
        is_best = shifted == 0
        return _masked_log_softmax(torch.zeros_like(shifted), is_best)
    return _masked_log_softmax(shifted / temperature, valid)


def weight_entropy(weights: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """Per-group Shannon entropy ``-sum_i w_i log w_i`` in nats of ``[num_groups, K]`` weights (``0 log 0 = 0``).

    Entries outside ``valid`` (when given) are ignored. Returns a ``[num_groups]`` tensor.
    """
    if valid is not None:
        weights = torch.where(valid, weights, 0.0)
    return torch.special.entr(weights).sum(dim=-1)


def _validate(
    rewards: torch.Tensor,
    *,
    tau: float,
    q_temperature: float,
    q_epsilon: float,
    beta: float,
    ref_term: torch.Tensor | None,
    mode_ids: torch.Tensor | None,
    mode_log_prob: torch.Tensor | None,
    valid: torch.Tensor | None,
) -> None:
    if rewards.dim() != 2:
        _fail("rewards", tuple(rewards.shape), "a [num_groups, G] tensor")
    if not (_is_number(tau) and tau >= 0):
        _fail("tau", tau, "a number >= 0 (math.inf allowed)")
    _check_finite("q_temperature", q_temperature, low=0.0, strict=True)
    if not (_is_number(q_epsilon) and 0 <= q_epsilon < 1):
        _fail("q_epsilon", q_epsilon, "a number in [0, 1)")
    _check_finite("beta", beta, low=0.0)
    if beta > 0 and ref_term is None:
        _fail("ref_term", None, "a [num_groups, G] tensor when beta > 0")
    if mode_log_prob is not None and mode_ids is None:
        _fail("mode_log_prob", "a tensor", "None when mode_ids is None (the correction acts on modes)")
    for name, tensor in (
        ("ref_term", ref_term),
        ("mode_ids", mode_ids),
        ("mode_log_prob", mode_log_prob),
        ("valid", valid),
    ):
        if tensor is not None and tensor.shape != rewards.shape:
            _fail(f"{name}.shape", tuple(tensor.shape), f"the shape of rewards {tuple(rewards.shape)}")
    if valid is not None and valid.dtype != torch.bool:
        _fail("valid.dtype", valid.dtype, "torch.bool")
    if mode_ids is not None:
        if mode_ids.dtype.is_floating_point or mode_ids.dtype == torch.bool:
            _fail("mode_ids.dtype", mode_ids.dtype, "an integer dtype")
        group_size = rewards.shape[1]
        if mode_ids.numel() and not (mode_ids.min() >= 0 and mode_ids.max() < group_size):
            _fail(
                "mode_ids",
                (int(mode_ids.min()), int(mode_ids.max())),
                f"ids in [0, G) = [0, {group_size}) local to each group",
            )


@torch.no_grad()
def compute_listwise(
    rewards: torch.Tensor,
    *,
    tau: float,
    q_temperature: float,
    q_epsilon: float,
    beta: float = 0.0,
    ref_term: torch.Tensor | None = None,
    mode_ids: torch.Tensor | None = None,
    mode_log_prob: torch.Tensor | None = None,
    valid: torch.Tensor | None = None,
) -> ListwiseResult:
    """Listwise MaxEnt weights, advantages and weight entropy of a batch of prompt groups (equations (1)-(5)).

    Args:
        rewards: ``[num_groups, G]`` rewards; non-finite entries count as invalid.
        tau: entropy temperature ``tau >= 0``; ``math.inf`` gives uniform weights.
        q_temperature: temperature ``T_q > 0`` of the reward softmax in (1).
        q_epsilon: smoothing ``epsilon`` in ``[0, 1)`` of (1).
        beta: weight ``>= 0`` of the reference prior; ``ref_term`` is used only when ``beta > 0``.
        ref_term: ``[num_groups, G]`` length-normalised reference log-prob per candidate (required when
            ``beta > 0``; non-finite entries then count as invalid).
        mode_ids: ``[num_groups, G]`` integer mode id per candidate, local to each group, in ``[0, G)``.
            None: candidate form.
        mode_log_prob: ``[num_groups, G]`` log of the sampling policy's probability of each candidate's mode (the
            same value for every candidate of a mode), for the importance-corrected mode form (5); needs
            ``mode_ids``. Non-finite entries count as invalid. None: (4).
        valid: ``[num_groups, G]`` bool mask of usable candidates. None: all candidates are usable.

    Returns:
        A [`ListwiseResult`] in the dtype of ``rewards`` (float32 for integer rewards), on its device. The
        computation runs in float64 (float32 on MPS) without gradients: the targets are frozen for the update.
    """
    _validate(
        rewards,
        tau=tau,
        q_temperature=q_temperature,
        q_epsilon=q_epsilon,
        beta=beta,
        ref_term=ref_term,
        mode_ids=mode_ids,
        mode_log_prob=mode_log_prob,
        valid=valid,
    )
    out_dtype = rewards.dtype if rewards.dtype.is_floating_point else torch.float32
    work_dtype = torch.float32 if rewards.device.type == "mps" else torch.float64
    r = rewards.detach().to(work_dtype)
    ok = torch.isfinite(r) if valid is None else valid & torch.isfinite(r)
    ref = None
    if beta > 0 and ref_term is not None:  # _validate requires ref_term when beta > 0
        ref = ref_term.detach().to(device=r.device, dtype=work_dtype)
        ok = ok & torch.isfinite(ref)
        ref = torch.where(ok, ref, 0.0)
    log_prob = None
    if mode_log_prob is not None:
        log_prob = mode_log_prob.detach().to(device=r.device, dtype=work_dtype)
        ok = ok & torch.isfinite(log_prob)
        log_prob = torch.where(ok, log_prob, 0.0)
    r = torch.where(ok, r, 0.0)
    settings = {"tau": tau, "q_temperature": q_temperature, "q_epsilon": q_epsilon, "beta": beta}

    if mode_ids is None:
        weights = _maxent_log_weights(r, ref, ok, **settings).exp()
        entropy = weight_entropy(weights)
    else:
        num_groups, group_size = r.shape
        # Flat segment index of (group, mode): each group owns the G slots [g * G, (g + 1) * G).
        offsets = torch.arange(num_groups, device=r.device).unsqueeze(-1) * group_size
        segment = (mode_ids.to(device=r.device, dtype=torch.long) + offsets).reshape(-1)
        flat_ok = ok.reshape(-1).to(work_dtype)

        def segment_sum(values: torch.Tensor) -> torch.Tensor:
            return torch.zeros(num_groups * group_size, dtype=work_dtype, device=r.device).index_add_(
                0, segment, values.reshape(-1) * flat_ok
            )

        mode_count = segment_sum(torch.ones_like(r)).reshape(num_groups, group_size)
        present = mode_count > 0
        safe_count = mode_count.clamp_min(1)
        mode_reward = segment_sum(r).reshape(num_groups, group_size) / safe_count
        mode_ref = None if ref is None else segment_sum(ref).reshape(num_groups, group_size) / safe_count
        log_mode_weights = _maxent_log_weights(mode_reward, mode_ref, present, **settings)
        # The entropy is that of the target (1)-(2); (5) only corrects for how the group sampled it.
        entropy = weight_entropy(log_mode_weights.exp())
        if log_prob is not None:
            # (5) in log space: log W + log n_m - log p_m, renormalised over the present modes (G_v cancels).
            # Mean per mode, each entry divided by its mode's count first so the sum cannot overflow.
            candidate_count = safe_count.reshape(-1).gather(0, segment).reshape(num_groups, group_size)
            mode_log_p = segment_sum(log_prob / candidate_count).reshape(num_groups, group_size)
            corrected = log_mode_weights + safe_count.log() - mode_log_p
            log_mode_weights = _masked_log_softmax(corrected, present & torch.isfinite(log_mode_weights))
        mode_weights = log_mode_weights.exp()
        per_sample = (mode_weights / safe_count).reshape(-1).gather(0, segment).reshape(num_groups, group_size)
        weights = torch.where(ok, per_sample, 0.0)

    num_valid = ok.sum(dim=-1, keepdim=True).to(work_dtype)
    advantages = torch.where(ok, num_valid * weights - 1.0, 0.0)
    return ListwiseResult(
        weights=weights.to(out_dtype), advantages=advantages.to(out_dtype), entropy=entropy.to(out_dtype)
    )


def listwise_weights(
    rewards: torch.Tensor,
    *,
    tau: float,
    q_temperature: float,
    q_epsilon: float,
    beta: float = 0.0,
    ref_term: torch.Tensor | None = None,
    mode_ids: torch.Tensor | None = None,
    mode_log_prob: torch.Tensor | None = None,
    valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """``[num_groups, G]`` candidate weights ``w_i`` of [`compute_listwise`] (rows sum to 1 over valid entries)."""
    return compute_listwise(
        rewards,
        tau=tau,
        q_temperature=q_temperature,
        q_epsilon=q_epsilon,
        beta=beta,
        ref_term=ref_term,
        mode_ids=mode_ids,
        mode_log_prob=mode_log_prob,
        valid=valid,
    ).weights


def listwise_advantages(
    rewards: torch.Tensor,
    *,
    tau: float,
    q_temperature: float,
    q_epsilon: float,
    beta: float = 0.0,
    ref_term: torch.Tensor | None = None,
    mode_ids: torch.Tensor | None = None,
    mode_log_prob: torch.Tensor | None = None,
    valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """``[num_groups, G]`` advantages ``G_v * w_i - 1`` of [`compute_listwise`] (zero-mean over valid entries)."""
    return compute_listwise(
        rewards,
        tau=tau,
        q_temperature=q_temperature,
        q_epsilon=q_epsilon,
        beta=beta,
        ref_term=ref_term,
        mode_ids=mode_ids,
        mode_log_prob=mode_log_prob,
        valid=valid,
    ).advantages


def annealed_tau(tau_start: float, tau_final: float, progress: float) -> float:
    """``tau`` annealed geometrically: ``tau_start * (tau_final / tau_start) ** progress``, progress clipped to [0, 1].

    Deterministic annealing (Rose, "Deterministic annealing for clustering, compression, classification, regression,
    and related optimization problems", Proc. IEEE 1998): a high early temperature keeps weight on many answers, so
    the policy goes on sampling (and finding) other correct answers; the low final one puts the target's weight on the
    best answers, so the reward converges. A geometric path spends equal time per factor of ``tau``.
    """
    _check_finite("tau_start", tau_start, low=0.0, strict=True)
    _check_finite("tau_final", tau_final, low=0.0, strict=True)
    _check_finite("progress", progress)
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
        _check_finite("tau", tau, low=0.0)
        if target_entropy is not None:
            _check_finite("target_entropy", target_entropy, low=0.0)
        _check_finite("lr", lr, low=0.0, strict=True)
        _check_finite("tau_min", tau_min, low=0.0)
        _check_finite("tau_max", tau_max, low=tau_min, low_name="tau_min")
        if not _is_count(warmup_steps, 0):
            _fail("warmup_steps", warmup_steps, "an integer >= 0")
        if not (_is_number(ema) and 0 <= ema < 1):
            _fail("ema", ema, "a number in [0, 1)")
        if target_entropy is not None and not (tau > 0 and tau_min <= tau <= tau_max):
            _fail(
                "tau", tau, f"a number > 0 in [tau_min, tau_max] = [{tau_min}, {tau_max}] when target_entropy is set"
            )
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
        _check_finite("measured_entropy", measured_entropy)
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
        _check_finite("state['tau']", tau, low=0.0)
        if ema_entropy is not None:
            _check_finite("state['ema_entropy']", ema_entropy)
        if not _is_count(step, 0):
            _fail("state['step']", step, "an integer >= 0")
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
        _check_finite("beta", beta, low=0.0)
        if kl_target is not None:
            _check_finite("kl_target", kl_target, low=0.0, strict=True)
            if beta == 0:
                _fail("beta", beta, "a number > 0 when kl_target is set (the controller scales beta)")
        _check_finite("horizon", horizon, low=0.0, strict=True)
        if not (_is_number(step_size) and 0 < step_size <= 1):
            _fail("step_size", step_size, "a number in (0, 1]")
        self.beta = float(beta)
        self.kl_target = None if kl_target is None else float(kl_target)
        self.horizon = float(horizon)
        self.step_size = float(step_size)

    def update(self, measured_kl: float, n_steps: int = 1) -> float:
        """Record the measured KL (finite) over the last ``n_steps >= 1`` steps and return the new ``beta``.

        ``beta`` never goes below 0 (reachable only when ``n_steps * step_size > horizon``).
        """
        _check_finite("measured_kl", measured_kl)
        if not _is_count(n_steps, 1):
            _fail("n_steps", n_steps, "an integer >= 1")
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
        _check_finite("state['beta']", state["beta"], low=0.0)
        self.beta = float(state["beta"])
