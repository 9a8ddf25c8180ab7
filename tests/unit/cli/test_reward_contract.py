"""A reward function that breaks TRL's contract (its signature, the count or type of what it returns, NaN or
infinity) is one UsageError naming the function; one that keeps it passes through unchanged, under its own name."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
import torch
from trl.trainer.utils import get_callable_name, is_async_callable

from maxent_grpo.cli.reward_contract import check_signature, checked
from maxent_grpo.cli.usage_error import UsageError
from maxent_grpo.rewards import REWARDS

COMPLETIONS = ["a", "b", "c"]
CALL = {"prompts": ["p"] * 3, "completions": COMPLETIONS, "completion_ids": [[1]] * 3, "trainer_state": None,
        "log_extra": None, "log_metric": None}  # fmt: skip


def returning(value):
    def reward(completions, **kwargs):
        return value

    return reward


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([1.0], "reward function my.reward returned 1 rewards for 3 completions: expected one per completion"),
        (1.0, "reward function my.reward returned float 1.0: expected a list of rewards"),
        ("abc", "returned str 'abc': expected a list of rewards"),
        ({"a": 1.0}, "returned dict {'a': 1.0}: expected a list of rewards"),
        (None, "returned NoneType None: expected a list of rewards"),
        ([1.0, "x", 0.0], "returned str 'x' for completion 1: expected a number or None"),
        ([1.0, True, 0.0], "returned bool True for completion 1: expected a number or None"),
        ([1.0, 0.0, math.inf], "returned inf for completion 2: expected a finite number or None"),
        ([math.nan, 0.0, 1.0], "returned nan for completion 0: expected a finite number or None"),
        (torch.tensor([1.0, -math.inf, 0.0]), "returned -inf for completion 1"),
    ],
)
def test_a_return_that_breaks_the_contract_is_one_line_naming_the_function(value, message):
    with pytest.raises(UsageError) as error:
        checked(returning(value), "my.reward")(**CALL)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "value", [[1.0, None, 0.5], (0, 1, 2), np.array([0.1, 0.2, 0.3]), torch.tensor([1.0, 2.0, 3.0])]
)
def test_a_return_that_keeps_the_contract_passes_through(value):
    assert checked(returning(value), "my.reward")(**CALL) is value


def test_the_checked_function_keeps_its_name_and_signature_for_trl():
    func = checked(REWARDS["vowel_start"], "vowel_start")
    assert get_callable_name(func) == get_callable_name(REWARDS["vowel_start"])
    check_signature(func, "vowel_start", ["prompt"])  # through the wrapper, to the function itself


def test_an_async_reward_function_stays_async_and_is_checked():
    async def reward(completions, **kwargs):
        return [1.0] * (len(completions) - 1)

    func = checked(reward, "my.async_reward")
    assert is_async_callable(func)
    with pytest.raises(UsageError, match=r"my\.async_reward returned 2 rewards for 3 completions"):
        asyncio.run(func(**CALL))


def test_a_signature_that_cannot_take_trls_keywords_is_refused():
    def narrow(completions):
        return [0.0] * len(completions)

    def positional_only(prompts, completions, /, **kwargs):
        return [0.0] * len(completions)

    def named_everything(prompts, completions, completion_ids, trainer_state, log_extra, log_metric, answer):
        return [0.0] * len(completions)

    with pytest.raises(UsageError, match=r"reward function narrow cannot be called the way TRL calls it \(got an "):
        check_signature(narrow, "narrow", ["prompt"])
    with pytest.raises(UsageError, match="positional_only cannot be called"):
        check_signature(positional_only, "positional_only", ["prompt"])
    check_signature(named_everything, "named_everything", ["prompt", "answer"])
    with pytest.raises(UsageError, match="got an unexpected keyword argument 'topic'"):
        check_signature(named_everything, "named_everything", ["prompt", "answer", "topic"])
