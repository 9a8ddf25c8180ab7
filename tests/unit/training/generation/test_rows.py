"""Rows <-> groups mapping: runs follow global group boundaries; assembled rows stay with their own prompt."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from maxent_grpo import Completion
from maxent_grpo.training.generation.rows import assemble_rows, local_runs


@settings(max_examples=200, deadline=None)
@given(
    group_size=st.integers(1, 9), num_processes=st.integers(1, 5), groups_per_batch=st.integers(1, 6), data=st.data()
)
def test_runs_partition_rows_along_group_boundaries(group_size, num_processes, groups_per_batch, data):
    total = group_size * groups_per_batch * num_processes
    per_process = total // num_processes
    process = data.draw(st.integers(0, num_processes - 1))
    offset = process * per_process
    runs = local_runs(per_process, offset, group_size)
    assert [row for run in runs for row in run] == list(range(per_process))  # a partition, in order
    for run in runs:
        groups = {(offset + row) // group_size for row in run}
        assert len(groups) == 1  # never mixes two groups
    for first, second in itertools.pairwise(runs):
        assert (offset + first[-1]) // group_size != (offset + second[0]) // group_size  # maximal runs


def test_straddling_layout():
    # 6 rows per process, groups of 4: process 1 holds the tail of group 1 and all of group 2.
    assert local_runs(6, 0, 4) == [range(0, 4), range(4, 6)]
    assert local_runs(6, 6, 4) == [range(0, 2), range(2, 6)]
    with pytest.raises(ValueError, match="group_size=0"):
        local_runs(4, 0, 0)


def _completion(tag: str, k: int) -> Completion:
    return Completion(text=f"{tag}{k}", prompt_ids=[ord(tag)], completion_ids=[k, 99], logprobs=[-0.5, -0.1])


def test_assemble_rows_keeps_each_row_with_its_run_and_masks_dropped_rows():
    runs = [range(0, 2), range(2, 4)]
    groups = [[_completion("a", 0), _completion("a", 1)], [_completion("b", 0)]]
    rows = assemble_rows(
        runs, groups, [True, True, False, False], placeholder_prompt_id=0, placeholder_completion_id=7
    )
    assert rows.texts == ["a0", "a1", "", ""]
    assert rows.prompt_ids == [[97], [97], [98], [98]]  # a dropped row keeps its own prompt's ids where known
    assert rows.completion_ids == [[0, 99], [1, 99], [7], [7]]
    assert rows.logprobs == [[-0.5, -0.1], [-0.5, -0.1], [0.0], [0.0]]
    assert rows.keep == [True, True, False, False]


def test_assemble_rows_without_logprobs_and_errors():
    runs = [range(0, 1)]
    no_logprobs = [[Completion(text="x", prompt_ids=[1], completion_ids=[2])]]
    rows = assemble_rows(runs, no_logprobs, [True], placeholder_prompt_id=0, placeholder_completion_id=7)
    assert rows.logprobs is None
    with pytest.raises(ValueError, match="kept but its group holds only 0"):
        assemble_rows(runs, [[]], [True], placeholder_prompt_id=0, placeholder_completion_id=7)
    with pytest.raises(ValueError, match="keep has 2 entries for 1 rows"):
        assemble_rows(runs, no_logprobs, [True, True], placeholder_prompt_id=0, placeholder_completion_id=7)


def test_keep_and_tool_masks_combine():
    def completion(mask):
        return Completion("t", [1], [5, 6, 7], tool_mask=mask)

    groups = [[completion([1, 0, 1]), completion(None)], [completion([1, 1, 0]), completion([1, 1, 0])]]
    rows = assemble_rows(
        [range(0, 2), range(2, 4)],
        groups,
        [True, True, False, False],
        placeholder_prompt_id=0,
        placeholder_completion_id=1,
    )
    assert rows.tool_mask() == [[1, 0, 1], [1, 1, 1], [0], [0]]  # a dropped row is all zeros, whatever its mask
    untouched = assemble_rows(
        [range(0, 1)], [[completion(None)]], [True], placeholder_prompt_id=0, placeholder_completion_id=1
    )
    assert untouched.tool_mask() is None  # TRL's None when nothing is masked
