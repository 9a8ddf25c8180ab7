"""Sequence log-probs of the sampling policy: TRL's own when it kept them, masked sums, non-finite tokens."""

from __future__ import annotations

import math

import torch

from maxent_grpo.objective.sequence_logps import sequence_logps


def no_forward(output: dict) -> torch.Tensor:
    raise AssertionError("TRL kept the old log-probs: no forward is needed")


def test_uses_trl_old_logps_and_counts_only_sampled_tokens() -> None:
    output = {
        "old_per_token_logps": torch.tensor([[-1.0, -2.0, -4.0], [-0.5, math.nan, math.nan]]),
        "completion_mask": torch.tensor([[1, 1, 0], [1, 0, 0]]),
        "tool_mask": torch.tensor([[1, 0, 1], [1, 1, 1]]),
    }
    # No forward is needed: row 0 counts its first token only (the second is tool output, the third
    # padding); row 1's NaNs sit on padding.
    torch.testing.assert_close(sequence_logps(output, no_forward), torch.tensor([-1.0, -0.5]))


def test_a_non_finite_counted_token_makes_the_sum_non_finite() -> None:
    output = {
        "old_per_token_logps": torch.tensor([[-1.0, math.nan], [-1.0, -math.inf]]),
        "completion_mask": torch.tensor([[1, 1], [1, 1]]),
    }
    result = sequence_logps(output, no_forward)
    assert math.isnan(result[0].item()) and result[1].item() == -math.inf
