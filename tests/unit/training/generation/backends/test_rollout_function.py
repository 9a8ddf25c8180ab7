"""`rollout_func` as a backend: rows become groups; a malformed row is a missing slot, a malformed return an error."""

from __future__ import annotations

import pytest

from maxent_grpo.training.generation.backends.rollout_function import RolloutFunctionBackend
from maxent_grpo.training.generation.collect import collect_completion_groups
from maxent_grpo.training.generation.contract.completion_check import CompletionCheck
from maxent_grpo.training.generation.contract.protocol import BackendContractError


def _decode(ids: list[int]) -> str:
    return "".join(chr(ord("a") + i) for i in ids)


def _backend(rollout_func) -> RolloutFunctionBackend:
    return RolloutFunctionBackend(rollout_func, trainer="the trainer", decode=_decode, vocab_size=26)


def test_rows_are_grouped_per_prompt_with_their_env_mask():
    seen = []

    def rollout(prompts, trainer):
        seen.append((list(prompts), trainer))
        return {
            "prompt_ids": [[ord(p[0]) - ord("a")] for p in prompts],
            "completion_ids": [[i, 25] for i in range(len(prompts))],
            "logprobs": [[-0.5, -0.25] for _ in prompts],
            "env_mask": [[1, 0] for _ in prompts],
        }

    groups = _backend(rollout).generate(["b?", "c?"], [2, 1])
    assert seen == [(["b?", "b?", "c?"], "the trainer")]
    assert [[c.prompt_ids for c in group] for group in groups] == [[[1], [1]], [[2]]]
    assert [c.text for c in groups[0]] == ["az", "bz"]
    assert groups[1][0].tool_mask == [1, 0] and groups[1][0].logprobs == [-0.5, -0.25]
    assert _backend(rollout).generate([], []) == []


def test_missing_keys_or_a_wrong_row_count_stop_with_a_clear_error():
    with pytest.raises(ValueError, match=r"rollout_func must return keys \['logprobs'\]"):
        _backend(lambda p, t: {"prompt_ids": [[1]], "completion_ids": [[2]]}).generate(["a"], [1])
    short = {"prompt_ids": [[1]], "completion_ids": [[2]], "logprobs": None}
    with pytest.raises(BackendContractError, match="1 rows of 'prompt_ids' for 2 prompts"):
        _backend(lambda p, t: short).generate(["a"], [2])


def test_malformed_rows_are_missing_slots_that_get_retried():
    calls = []

    def rollout(prompts, trainer):
        calls.append(len(prompts))
        if len(calls) == 1:  # out of the vocabulary, not ids, mask of the wrong length, a logprob that is no number
            bad = [[3, 99], "text", [3, 4], [3, 4]]
            return {
                "prompt_ids": [[1]] * 4,
                "completion_ids": bad,
                "logprobs": [None, None, None, [0.0, "x"]],
                "env_mask": [[1, 1], [1], [1], [1, 1]],
            }
        return {"prompt_ids": [[1]] * len(prompts), "completion_ids": [[3]] * len(prompts), "logprobs": None}

    collected = collect_completion_groups(_backend(rollout), ["a"], [4], retry_limit=1, check=CompletionCheck(26))
    assert calls == [4, 4] and collected.complete == [True]
    assert collected.stats["invalid_completions"] == 4


def test_a_process_with_no_slot_missing_still_calls_the_rollout_func_with_no_prompts():
    """A collective rollout_func (TRL's vLLM generation gathers every process's prompts) meets the same calls on
    every process, also in a retry round in which only another process has slots missing."""
    calls: list[list[str]] = []

    def rollout_func(prompts, trainer):
        calls.append(list(prompts))
        return {"prompt_ids": [[1]] * len(prompts), "completion_ids": [[2]] * len(prompts), "logprobs": None}

    assert _backend(rollout_func).generate(["a", "b"], [0, 0]) == [[], []]
    assert calls == [[]]


def test_numpy_and_torch_rows_are_taken_as_lists_and_other_keys_ride_along_per_row():
    import numpy as np
    import torch

    def rollout(prompts, trainer):
        return {
            "prompt_ids": [np.array([1, 2]) for _ in prompts],
            "completion_ids": [torch.tensor([3, 25]) for _ in prompts],
            "logprobs": [np.array([-0.5, -0.25], dtype=np.float32) for _ in prompts],
            "turns": list(range(len(prompts))),
            "source": "env",
        }

    groups = _backend(rollout).generate(["b?", "c?"], [2, 1])
    completion = groups[1][0]
    assert completion.prompt_ids == [1, 2] and completion.completion_ids == [3, 25]
    assert completion.logprobs == [-0.5, -0.25] and not completion.failed
    assert all(type(token) is int for token in completion.completion_ids)
    assert [c.extra_fields for group in groups for c in group] == [
        {"turns": 0, "source": "env"},
        {"turns": 1, "source": "env"},
        {"turns": 2, "source": "env"},
    ]
