r"""Maximum-entropy listwise weights and advantages (the controllers that steer tau and beta: `controllers`).

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
:math:`n_m / G_v` of a mode in the group as its probability under :math:`\pi`. Given instead an estimate
:math:`\hat p_m` of that probability (``mode_log_prob``), the mode weights become the self-normalised importance
weights of the target over the group, each factor truncated at :math:`c` (``correction_clip``):

.. math::

    W_m \propto W^{(1-2)}_m \, \min\!\Big(c,\ \frac{n_m / G_v}{\hat p_m}\Big)                            \qquad (5)

where :math:`W^{(1-2)}_m` are the mode weights of (1)-(2); :math:`\hat p_m = n_m / G_v` gives back (4). A mode
the policy has nearly lost (say :math:`\hat p_m = 0.003`) that turns up once in a group of 16 is over-represented
20-fold and, with :math:`c \ge 20`, gets that much more of the target, so it is pulled back up while it is still
sampled at all; with (4) it would get the weight of a mode that holds 1/16 of the policy (an unlikeliness reward at
the answer level; He et al., 2025, arXiv 2506.02355). With :math:`\tau > 0` the correction applies to every mode,
wrong ones included (a rare wrong answer is explored, not only penalised); with :math:`\tau = 0` it acts among the
best modes only. The truncation bounds what one rare completion can draw to itself when :math:`\hat p_m`
underestimates its mode (an answer reached along many completions, of which a group holds a few): :math:`c = G`
trusts :math:`\hat p_m` down to :math:`1 / G^2` for a mode sampled once.

Validity. Candidates marked invalid (dropped rows), or whose reward is not finite, or whose reference term is
not finite while :math:`\beta > 0`, or whose ``mode_log_prob`` is not finite, get weight 0 and advantage 0; the
others are normalised among themselves, with :math:`G` replaced by the number of valid candidates :math:`G_v` in
(1), (3) and (5). A group with no valid candidate gets all-zero weights and advantages.

Limits. :math:`\tau \to \infty` gives uniform weights (zero advantages; with (5), the weights that undo the
group's sampling, up to the truncation); :math:`\tau + \beta = 0` (that is
:math:`\tau = 0, \beta = 0`) is computed exactly as the limit :math:`\tau \to 0`: the weight is shared equally by the
candidates (or modes) with the highest reward. All arithmetic is done in float64 (float32 on Apple MPS, which has
no float64) in log space (``log_softmax``, ``logaddexp``), so results are finite for rewards of any sign and scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from maxent_grpo.objective.value_checks import check_finite, fail, is_number

__all__ = ["ListwiseResult", "compute_listwise", "weight_entropy"]


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
        valid: ``[num_groups, G]`` bool mask of the candidates that counted (given as valid, with finite rewards,
            and finite reference and mode terms where those are used).
    """

    weights: torch.Tensor  # [num_groups, G]
    advantages: torch.Tensor  # [num_groups, G]
    entropy: torch.Tensor  # [num_groups]
    valid: torch.Tensor  # [num_groups, G] bool


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
    correction_clip: float,
    valid: torch.Tensor | None,
) -> None:
    if rewards.dim() != 2:
        fail("rewards", tuple(rewards.shape), "a [num_groups, G] tensor")
    if not (is_number(tau) and tau >= 0):
        fail("tau", tau, "a number >= 0 (math.inf allowed)")
    check_finite("q_temperature", q_temperature, low=0.0, strict=True)
    if not (is_number(q_epsilon) and 0 <= q_epsilon < 1):
        fail("q_epsilon", q_epsilon, "a number in [0, 1)")
    check_finite("beta", beta, low=0.0)
    if beta > 0 and ref_term is None:
        fail("ref_term", None, "a [num_groups, G] tensor when beta > 0")
    if not (is_number(correction_clip) and correction_clip >= 1):
        fail("correction_clip", correction_clip, "a number >= 1 (math.inf: no clip)")
    if mode_log_prob is not None and mode_ids is None:
        fail("mode_log_prob", "a tensor", "None when mode_ids is None (the correction acts on modes)")
    for name, tensor in (
        ("ref_term", ref_term),
        ("mode_ids", mode_ids),
        ("mode_log_prob", mode_log_prob),
        ("valid", valid),
    ):
        if tensor is not None and tensor.shape != rewards.shape:
            fail(f"{name}.shape", tuple(tensor.shape), f"the shape of rewards {tuple(rewards.shape)}")
    if valid is not None and valid.dtype != torch.bool:
        fail("valid.dtype", valid.dtype, "torch.bool")
    if mode_ids is not None:
        if mode_ids.dtype.is_floating_point or mode_ids.dtype == torch.bool:
            fail("mode_ids.dtype", mode_ids.dtype, "an integer dtype")
        group_size = rewards.shape[1]
        if mode_ids.numel() and not (mode_ids.min() >= 0 and mode_ids.max() < group_size):
            fail(
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
    correction_clip: float = math.inf,
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
        correction_clip: the truncation ``c >= 1`` of the importance factor of (5); ``math.inf``: none. Unused
            without ``mode_log_prob``.
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
        correction_clip=correction_clip,
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
            # (5) in log space: log W + min(log c, log(n_m / G_v) - log p_m), renormalised over the present modes.
            # Mean per mode, each entry divided by its mode's count first so the sum cannot overflow.
            candidate_count = safe_count.reshape(-1).gather(0, segment).reshape(num_groups, group_size)
            mode_log_p = segment_sum(log_prob / candidate_count).reshape(num_groups, group_size)
            log_share = safe_count.log() - ok.sum(dim=-1, keepdim=True).clamp_min(1).to(work_dtype).log()
            corrected = log_mode_weights + (log_share - mode_log_p).clamp(max=math.log(correction_clip))
            log_mode_weights = _masked_log_softmax(corrected, present & torch.isfinite(log_mode_weights))
        mode_weights = log_mode_weights.exp()
        per_sample = (mode_weights / safe_count).reshape(-1).gather(0, segment).reshape(num_groups, group_size)
        weights = torch.where(ok, per_sample, 0.0)

    num_valid = ok.sum(dim=-1, keepdim=True).to(work_dtype)
    advantages = torch.where(ok, num_valid * weights - 1.0, 0.0)
    return ListwiseResult(
        weights=weights.to(out_dtype), advantages=advantages.to(out_dtype), entropy=entropy.to(out_dtype), valid=ok
    )
