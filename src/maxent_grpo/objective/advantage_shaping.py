r"""Reshaping the listwise advantages of a batch of prompt groups after the target: pass@k weights, positive scale.

Pure torch, no trainer dependency, ``[num_groups, G]`` tensors as in `maxent_grpo.objective.weights`. Both act on the
advantages :math:`A_i = G_v w_i - 1` of equation (3), after the target is computed, and both leave a batch unchanged
at their defaults (``k = 1``, ``scale = 1``).

Pass@k group weights (`pass_at_k_group_weights`). With binary (verifiable) rewards, the gradient of pass@k with
respect to a prompt's success probability :math:`p` is :math:`k (1 - p)^{k-1}` times that of pass@1: a prompt the
policy already solves adds little to pass@k, one it rarely solves adds nearly as much as to pass@1. For a group of
:math:`n` valid candidates of which :math:`c` reach the group's best reward, the weight

.. math::

    \omega_g = \binom{n - c}{k - 1} \Big/ \binom{n - 1}{k - 1}                           \qquad (6)

is the chance that a success is the only one among :math:`k` of the group's samples drawn without replacement (the
other :math:`k - 1` from the :math:`n - 1` others all fail), the unbiased, per-group form of the pass@k estimators
of PKPO (Walder and Karkhanis, 2025, arXiv 2505.15201) and Pass@k Training (Chen et al., 2025, arXiv 2508.10751).
Each group's advantages are multiplied by :math:`\omega_g`, renormalised to mean 1 over the groups that have a
reward spread (the others have zero advantages anyway), so the step size stays that of pass@1 on average.
:math:`k = 1` gives :math:`\omega_g = 1`. With continuous rewards a group's best reward is usually reached by one
candidate (:math:`c = 1`, :math:`\omega_g = 1` for every :math:`k`), so the weights are meant for 0/1 rewards.

Positive scale (`scale_positive`). :math:`A_i \leftarrow \lambda A_i` where :math:`A_i > 0`: with
:math:`\lambda < 1` the update leans on pushing the group's below-target candidates down and lets the policy spread
the freed probability as it already does, which the weighted REINFORCE of Zhu et al. (2025, arXiv 2506.01347) found
to keep pass@k at large k; the advantages then no longer sum to zero within a group.
"""

from __future__ import annotations

import math

import torch

from maxent_grpo.objective.value_checks import check_finite, fail, is_count

__all__ = ["pass_at_k_group_weights", "scale_positive"]


@torch.no_grad()
def pass_at_k_group_weights(rewards: torch.Tensor, valid: torch.Tensor, k: int) -> torch.Tensor:
    """The pass@k weight (6) of every group, renormalised to mean 1 over the groups with a reward spread.

    Args:
        rewards: ``[num_groups, G]`` rewards; only entries marked ``valid`` are read.
        valid: ``[num_groups, G]`` bool mask of the usable candidates (finite rewards).
        k: the k of pass@k, ``1 <= k <= G`` (1: every weight is 1); a group with fewer than ``k`` valid candidates
            uses its number of valid candidates instead.

    Returns:
        ``[num_groups]`` weights in the dtype of ``rewards`` (float32 for integer rewards). A group whose valid
        rewards are all equal (no candidate is better than another) gets weight 0; so does every group when no group
        with a spread has a weight above 0 (each prompt is solved often enough that pass@k cannot rise).

    Raises:
        ValueError: for shapes that differ, a ``valid`` that is not bool, or ``k`` outside ``[1, G]``.
    """
    if rewards.dim() != 2 or valid.shape != rewards.shape:
        fail("rewards/valid shapes", (tuple(rewards.shape), tuple(valid.shape)), "one [num_groups, G] shape")
    if valid.dtype != torch.bool:
        fail("valid.dtype", valid.dtype, "torch.bool")
    group_size = rewards.shape[1]
    if not (is_count(k, 1) and k <= group_size):
        fail("k", k, f"an integer in [1, G] = [1, {group_size}]")
    dtype = rewards.dtype if rewards.dtype.is_floating_point else torch.float32
    r = rewards.detach().double()
    top = r.masked_fill(~valid, -math.inf).amax(dim=-1, keepdim=True)
    bottom = r.masked_fill(~valid, math.inf).amin(dim=-1, keepdim=True)
    spread = (valid.any(dim=-1, keepdim=True) & (top > bottom)).squeeze(-1)
    n = valid.sum(dim=-1).tolist()
    c = (valid & (r == top)).sum(dim=-1).tolist()
    # Binomial coefficients of at most G: exact in Python integers (torch has no binomial of integers).
    raw = [
        math.comb(total - best, min(k, total) - 1) / math.comb(total - 1, min(k, total) - 1) if has_spread else 0.0
        for total, best, has_spread in zip(n, c, spread.tolist(), strict=True)
    ]
    weights = torch.tensor(raw, dtype=torch.float64, device=rewards.device)
    mean = weights[spread].mean() if bool(spread.any()) else weights.new_zeros(())
    if mean > 0:
        weights = weights / mean
    return weights.to(dtype)


def scale_positive(advantages: torch.Tensor, scale: float) -> torch.Tensor:
    """``advantages`` with every entry above 0 multiplied by ``scale > 0`` (the others unchanged).

    Raises:
        ValueError: for a ``scale`` that is not a finite number above 0.
    """
    check_finite("scale", scale, low=0.0, strict=True)
    if scale == 1.0:
        return advantages
    return torch.where(advantages > 0, advantages * scale, advantages)
