"""Unscored rows leave the batch as dropped rows do; a group left with fewer than two scored rows leaves whole."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from maxent_grpo.training.reward_scoring.unscored_rows import leave_out_unscored


def test_a_failed_row_leaves_and_its_group_keeps_the_scored_rows():
    rewards = torch.tensor([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0]])
    failed = torch.tensor([[True], [False], [False], [True], [True], [False]])
    keep = torch.ones(6, dtype=torch.bool)
    kept = leave_out_unscored(rewards, failed, keep, group_size=3)
    # group 0 keeps two scored rows; group 1 keeps one, which has no baseline: the group leaves
    assert kept.tolist() == [False, True, True, False, False, False]
    assert torch.isnan(rewards[~kept]).all() and rewards[kept].flatten().tolist() == [2.0, 3.0]


def test_a_function_failing_leaves_out_the_row_even_when_another_scored_it():
    rewards = torch.tensor([[1.0, 0.5], [2.0, 0.5], [3.0, 0.5], [4.0, 0.5]])
    failed = torch.tensor([[False, True], [False, False], [False, False], [False, False]])
    kept = leave_out_unscored(rewards, failed, torch.ones(4, dtype=torch.bool), group_size=4)
    assert kept.tolist() == [False, True, True, True]
    assert torch.isnan(rewards[0]).all()  # no made-up 0 for the function that failed, and no half-scored row


@settings(max_examples=200, deadline=None)
@given(  # rows: (group kept by generation (its first row's flag counts), failed for function 1, for function 2)
    st.integers(2, 4).flatmap(
        lambda g: st.tuples(
            st.just(g),
            st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans()), min_size=g, max_size=4 * g).map(
                lambda rows, g=g: rows[: len(rows) - len(rows) % g]
            ),
        )
    )
)
def test_kept_rows_are_scored_kept_and_in_groups_of_at_least_two(case):
    group_size, rows = case
    if not rows:
        return
    keep = torch.tensor([k for k, _, _ in rows]).view(-1, group_size)[:, :1].repeat(1, group_size).flatten()
    failed = torch.tensor([[f1, f2] for _, f1, f2 in rows])
    rewards = torch.arange(2.0 * len(rows)).view(-1, 2)
    before = rewards.clone()
    kept = leave_out_unscored(rewards, failed, keep, group_size)
    assert not (kept & ~keep).any()  # nothing comes back
    assert not (kept & failed.any(dim=1)).any()  # no failed row stays
    untouched = ~failed.view(-1, group_size, 2).any(dim=(1, 2)).repeat_interleave(group_size)
    assert torch.equal(kept[untouched], keep[untouched])  # a group without failures is left as it is
    per_group = kept.view(-1, group_size).sum(dim=1)
    hit = ~untouched.view(-1, group_size)[:, 0]
    assert ((per_group[hit] == 0) | (per_group[hit] >= 2)).all()
    assert torch.equal(rewards[kept], before[kept]) and torch.isnan(rewards[~kept]).all()
