"""Which groups lack learning signal, and reproducible replacement draws."""

from __future__ import annotations

import math

import pytest
import torch
from datasets import Dataset

from maxent_grpo.training.dynamic_sampling import DynamicSampler, draw_replacements, groups_without_signal

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
