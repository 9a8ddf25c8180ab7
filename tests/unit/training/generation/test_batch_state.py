"""`GenerationBatchState`: whether a batch dropped rows, and recording its rewards without changing the state."""

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


def test_with_rewards_returns_a_new_state_and_leaves_the_old_one():
    inputs = [{"prompt": "p"}]
    state = GenerationBatchState(inputs, keep=[True], global_keep=torch.tensor([True]), texts=["a"])
    rewards = torch.tensor([[1.0]])
    scored = state.with_rewards(rewards)
    assert scored.rewards_per_func is rewards and state.rewards_per_func is None
    assert scored.inputs is inputs and scored.keep == [True] and scored.texts == ["a"]
