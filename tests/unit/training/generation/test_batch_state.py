"""`GenerationBatchState`: whether a batch dropped rows, and recording its scoring without changing the state."""

import torch

from maxent_grpo.training.generation.batch_state import GenerationBatchState


def test_a_state_before_generation_has_dropped_nothing():
    state = GenerationBatchState([{"prompt": "p"}])
    assert state.keep is None and state.global_keep is None and state.texts == []
    assert not state.dropped_any


def test_dropped_any_reads_every_process_keep_mask():
    kept = GenerationBatchState([], keep=[True, True], global_keep=torch.tensor([True, True, True, True]))
    dropped = GenerationBatchState([], keep=[True, True], global_keep=torch.tensor([True, True, False, False]))
    assert not kept.dropped_any  # this process kept every row, and so did the other
    assert dropped.dropped_any  # only another process's rows were dropped


def test_scored_returns_a_new_state_with_the_rewards_and_this_process_slice_of_the_keep_mask():
    inputs = [{"prompt": "p"}, {"prompt": "q"}]
    state = GenerationBatchState(inputs, keep=[True, True], global_keep=torch.ones(4, dtype=torch.bool), texts=["a"])
    rewards = torch.tensor([[1.0], [2.0], [3.0], [float("nan")]])
    scored = state.scored(rewards, torch.tensor([True, True, True, False]), process_index=1)
    assert scored.rewards_per_func is rewards and state.rewards_per_func is None
    assert scored.keep == [True, False] and state.keep == [True, True]
    assert scored.global_keep.tolist() == [True, True, True, False] and scored.dropped_any
    assert scored.inputs is inputs and scored.texts == ["a"]
