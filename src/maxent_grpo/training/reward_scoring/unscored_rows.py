"""Rows a reward function could not score leave the batch as dropped rows do (invariants I3 / I6).

A made-up reward (a 0 for a scorer that did not answer) is indistinguishable from a real one and bends the group's
baseline. So a row that some reward function failed to score, after its retries, is unscored: its rewards are NaN
(TRL then keeps it out of the group baseline and of the reward statistics) and it is no longer kept (the trainer's
keep mask, which keeps it out of the loss, its normalisers, the metrics and the controllers, as a dropped row). A
group left with fewer than two scored rows has no baseline to compare with, so the whole group leaves too. Rows that
a function left None on purpose (it does not apply to them) are TRL's business and stay as they are.
"""

from __future__ import annotations

import torch


def leave_out_unscored(
    rewards_per_func: torch.Tensor, failed: torch.Tensor, keep: torch.Tensor, group_size: int
) -> torch.Tensor:
    """The keep mask without the unscored rows, the rewards of every row not kept set to NaN in place.

    Args:
        rewards_per_func: [N, F] rewards of every process's rows, one column per reward function.
        failed: [N, F] bool, True where the reward function's call failed for the row after its retries.
        keep: [N] bool, the rows kept by the generation step.
        group_size: G; rows come in consecutive groups of G.

    Returns:
        [N] bool: ``keep`` less the rows some function failed on, and less every row of a group that this leaves
        with fewer than two scored rows (a group without failures is left as it is).
    """
    keep = keep.to(rewards_per_func.device)
    failed = failed.to(rewards_per_func.device)
    unscored = failed.any(dim=1) & keep
    scored = keep & ~unscored
    hit = unscored.view(-1, group_size).any(dim=1)
    lost = hit & (scored.view(-1, group_size).sum(dim=1) < 2)
    kept = scored & ~lost.repeat_interleave(group_size)
    rewards_per_func[~kept] = torch.nan
    return kept
