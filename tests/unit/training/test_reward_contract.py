"""A reward function return that breaks TRL's contract (the count or type of what it returns, NaN or infinity) is one
`RewardContractError` naming the function; one that keeps it passes through unchanged, under TRL's name."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from trl.trainer.utils import get_callable_name, is_async_callable

from maxent_grpo.rewards import REWARDS
from maxent_grpo.training.reward_contract import RewardContractError, checked

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
    with pytest.raises(RewardContractError) as error:
        checked(returning(value), "my.reward")(**CALL)
    assert message in str(error.value)
    assert "\n" not in str(error.value)
    assert isinstance(error.value, ValueError)


@pytest.mark.parametrize(
    "value", [[1.0, None, 0.5], (0, 1, 2), np.array([0.1, 0.2, 0.3]), torch.tensor([1.0, 2.0, 3.0])]
)
def test_a_return_that_keeps_the_contract_passes_through(value):
    assert checked(returning(value), "my.reward")(**CALL) is value


def test_the_checked_function_keeps_trls_name_for_it():
    func = checked(REWARDS["vowel_start"], "vowel_start")
    assert get_callable_name(func) == get_callable_name(REWARDS["vowel_start"])


def test_checking_a_checked_function_again_keeps_the_first_name():
    once = checked(returning([1.0]), "my_rewards.reward")
    assert checked(once, "reward") is once
    with pytest.raises(RewardContractError, match=r"^reward function my_rewards\.reward returned 1 rewards"):
        once(**CALL)


@dataclass
class ScaledReward:  # a dataclass compares by value, so it is not hashable
    scale: float

    def __call__(self, completions, **kwargs):
        return [self.scale] * len(completions)


def test_an_unhashable_callable_reward_is_checked_too():
    func = checked(ScaledReward(math.inf), "scaled")
    assert get_callable_name(func) == "ScaledReward"
    with pytest.raises(RewardContractError, match="reward function scaled returned inf for completion 0"):
        func(**CALL)


def test_an_async_reward_function_stays_async_and_is_checked():
    async def reward(completions, **kwargs):
        return [1.0] * (len(completions) - 1)

    func = checked(reward, "my.async_reward")
    assert is_async_callable(func)
    with pytest.raises(RewardContractError, match=r"my\.async_reward returned 2 rewards for 3 completions"):
        asyncio.run(func(**CALL))
