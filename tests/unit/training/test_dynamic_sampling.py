"""Which groups lack learning signal, reproducible replacement draws and the sampler's checkpoint state."""

from __future__ import annotations

import json
import math

import pytest
import torch
from datasets import Dataset

from maxent_grpo.training.dynamic_sampling import (
    DynamicSampler,
    UnknownRewardMetricError,
    draw_replacements,
    groups_without_signal,
    metric_column,
)

nan = math.nan


def test_flat_dropped_and_unscorable_groups_have_no_signal():
    metric = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [nan, 2.0, 2.0], [nan, nan, 3.0], [5.0, 5.0, 6.0]])
    kept = torch.tensor([True, True, True, True, False])
    assert groups_without_signal(metric, kept).tolist() == [True, False, True, True, True]


def test_draws_are_reproducible_and_in_range():
    first = draw_replacements(10, 50, seed=7)
    assert first == draw_replacements(10, 50, seed=7)
    assert first != draw_replacements(10, 50, seed=8)
    assert all(0 <= i < 10 for i in first)


def test_metric_sum_or_one_column():
    rewards = torch.tensor([[1.0, 2.0], [nan, nan], [nan, 3.0]])
    weights = torch.tensor([1.0, 0.5])
    data = Dataset.from_dict({"prompt": ["a"]})
    summed = DynamicSampler(data, weights, metric_column=None, max_rounds=1, error_at_cap=False, seed=0)
    assert summed.metric(rewards)[0].item() == 2.0 and math.isnan(summed.metric(rewards)[1].item())
    assert summed.metric(rewards)[2].item() == 1.5
    column = DynamicSampler(data, weights, metric_column=1, max_rounds=1, error_at_cap=False, seed=0)
    assert column.metric(rewards)[0].item() == 2.0


def test_rejects_unusable_datasets():
    weights = torch.ones(1)
    with pytest.raises(ValueError, match="non-empty"):
        DynamicSampler(Dataset.from_dict({"prompt": []}), weights, metric_column=None, max_rounds=1,
                       error_at_cap=False, seed=0)  # fmt: skip
    images = Dataset.from_dict({"prompt": ["a"], "image": [None]})
    with pytest.raises(ValueError, match="image"):
        DynamicSampler(images, weights, metric_column=None, max_rounds=1, error_at_cap=False, seed=0)


def _sampler(seed: int = 0) -> DynamicSampler:
    data = Dataset.from_dict({"prompt": [f"p{i}:" for i in range(1000)]})
    return DynamicSampler(data, torch.ones(1), metric_column=None, max_rounds=1, error_at_cap=False, seed=seed)


def _refill(sampler: DynamicSampler) -> list[str]:
    """One generation batch of two flat groups of 2 (one process); returns the replacement prompts it drew."""
    prompts = ["a:", "a:", "b:", "b:"]
    inputs = [{"prompt": p} for p in prompts]
    rounds: list[list[int]] = []

    def score(rows: list[bool]) -> tuple[torch.Tensor, torch.Tensor]:
        flat = not rounds  # every group has signal once it was replaced
        rewards = torch.zeros(4, 1) if flat else torch.tensor([[0.0], [1.0], [0.0], [1.0]])
        return rewards, torch.ones(2, dtype=torch.bool)

    def regenerate(rows: list[int]) -> torch.Tensor:
        rounds.append(rows)
        return torch.ones(2, dtype=torch.bool)

    outcome = sampler.refill(
        group_size=2, row_offset=0, inputs=inputs, prompts=prompts, score=score, regenerate=regenerate
    )
    assert outcome.rounds == 1 and outcome.groups_with_signal == 2
    assert [row["prompt"] for row in inputs] == prompts
    return prompts


def test_each_generation_batch_draws_new_replacements():
    # Two generation batches inside one optimizer step (the global step does not move between them).
    sampler = _sampler()
    first, second = _refill(sampler), _refill(sampler)
    assert first != second
    assert sampler.state_dict() == {"generation_batches": 2}
    assert _refill(_sampler()) == first  # reproducible for the same seed
    assert _refill(_sampler(seed=1)) != first


def test_a_restored_sampler_draws_what_the_original_draws_next():
    original = _sampler()
    _refill(original)
    _refill(original)
    restored = _sampler()
    restored.load_state_dict(json.loads(json.dumps(original.state_dict())))
    fresh = _sampler()
    assert _refill(restored) == _refill(original) != _refill(fresh)


@pytest.mark.parametrize("batches", [-1, 1.5, True, "2"])
def test_state_rejects_invalid_counters(batches):
    with pytest.raises(ValueError, match="generation_batches"):
        _sampler().load_state_dict({"generation_batches": batches})


def test_the_metric_names_sum_or_a_reward_function():
    names = ["correct", "short_answer"]
    assert metric_column("sum", names) is None
    assert metric_column("short_answer", names) == 1
    with pytest.raises(UnknownRewardMetricError) as error:
        metric_column("short_answers", names)
    assert str(error.value) == (
        "dynamic_sampling_metric='short_answers' is invalid: expected 'sum' or the name of a reward function, one of "
        "['correct', 'short_answer']; did you mean 'short_answer'?"
    )
    with pytest.raises(ValueError, match=r"one of \['correct', 'short_answer'\]\.$"):
        metric_column("length", names)
