"""The sampling policy's probability of each candidate's mode, estimated from the completions a group sampled.

The importance-corrected mode form of the listwise objective (equation (5) of `maxent_grpo.objective`) needs, for each
mode of a group, the probability :math:`p_m` that the sampling policy gives that answer. The policy's probability of
one completion is known (its summed token log-probs); a mode's probability is the sum over every completion that
gives that answer, and only the sampled ones are known. The estimate is the sum over the *distinct* completions of
the mode that the group holds (a completion sampled three times counts once):

- exact when every answer is one token sequence (short answers keyed by the whole completion, e.g. ``last_line`` on
  a two-digit answer);
- a lower bound otherwise, which over-weights modes whose probability is spread over many completions. For long
  reasoning completions, where each sampled completion is one of countless paths to its answer, the bound is
  useless: keep ``maxent_mode_probability="count"`` there.

Pure Python over token-id tuples: the deduplication is a per-group dictionary, which torch has no primitive for.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import torch


def mode_log_probs(
    mode_ids: torch.Tensor,
    completions: Sequence[Sequence[Hashable]],
    sequence_log_probs: torch.Tensor,
    valid: torch.Tensor,
) -> torch.Tensor:
    """``[num_groups, G]`` log-probability estimate of each candidate's mode: logsumexp over its distinct completions.

    Args:
        mode_ids: ``[num_groups, G]`` mode id per candidate, local to each group.
        completions: per group, per candidate, a hashable identity of the completion (its token ids as a tuple);
            equal identities are one completion.
        sequence_log_probs: ``[num_groups, G]`` the sampling policy's log-probability of each completion.
        valid: ``[num_groups, G]`` bool mask; invalid candidates neither contribute nor get an estimate (their entry
            is ``-inf``), and neither does a candidate whose log-probability is not finite.

    Returns:
        A float64 tensor on the CPU (Apple MPS has no float64; `compute_listwise` moves and casts it).
    """
    shape = tuple(mode_ids.shape)
    if tuple(sequence_log_probs.shape) != shape or tuple(valid.shape) != shape:
        raise ValueError(
            f"mode_ids, sequence_log_probs and valid must have one shape, got {shape}, "
            f"{tuple(sequence_log_probs.shape)} and {tuple(valid.shape)}"
        )
    if len(completions) != shape[0] or any(len(group) != shape[1] for group in completions):
        raise ValueError(f"completions must hold {shape[0]} groups of {shape[1] if len(shape) > 1 else 0}")
    ids = mode_ids.tolist()
    log_probs = sequence_log_probs.detach().cpu().double().tolist()
    usable = valid.tolist()
    result: list[list[float]] = []
    for group_ids, group_completions, group_log_probs, group_usable in zip(
        ids, completions, log_probs, usable, strict=True
    ):
        distinct: dict[int, dict[Hashable, float]] = {}
        for mode, completion, log_prob, ok in zip(
            group_ids, group_completions, group_log_probs, group_usable, strict=True
        ):
            if ok and math.isfinite(log_prob):
                distinct.setdefault(mode, {}).setdefault(completion, log_prob)
        per_mode = {
            mode: torch.logsumexp(torch.tensor(list(seen.values()), dtype=torch.float64), dim=0).item()
            for mode, seen in distinct.items()
        }
        result.append(
            [
                per_mode.get(mode, -math.inf) if ok and math.isfinite(log_prob) else -math.inf
                for mode, log_prob, ok in zip(group_ids, group_log_probs, group_usable, strict=True)
            ]
        )
    return torch.tensor(result, dtype=torch.float64).reshape(shape)
