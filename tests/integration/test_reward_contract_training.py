"""`MaxEntGRPOTrainer` checks what every reward function returns, for Python users as for the command line: a return
TRL cannot train on stops the run with one `RewardContractError` naming the function, before any update; the check
sees only kept rows, and TRL's reward names (metrics) and async reward functions keep working."""

from __future__ import annotations

import math

import pytest
import torch

from maxent_grpo import MaxEntGRPOTrainer
from maxent_grpo.training.reward_contract import RewardContractError
from tests.support.tagged_backend import TaggedBackend
from tests.support.training import letter_dataset, tiny_config, tiny_model_and_tokenizer

pytestmark = pytest.mark.slow


def infinite_reward(completions, **kwargs):
    return [math.inf, *[1.0] * (len(completions) - 1)]


async def one_short_reward(completions, **kwargs):
    return [1.0] * (len(completions) - 1)


def length_reward(completions, **kwargs):
    return [float(len(completion)) for completion in completions]


async def async_length_reward(completions, **kwargs):
    return [-float(len(completion)) for completion in completions]


def _trainer(tmp_path, reward_funcs, **config):
    model, tokenizer = tiny_model_and_tokenizer()
    return MaxEntGRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=tiny_config(tmp_path, **config),
        train_dataset=letter_dataset(12),
        processing_class=tokenizer,
    )


def test_an_infinite_reward_stops_the_run_before_any_update(tmp_path):
    trainer = _trainer(tmp_path, [length_reward, infinite_reward])
    before = [parameter.detach().clone() for parameter in trainer.model.parameters()]
    with pytest.raises(RewardContractError) as error:
        trainer.train()
    message = str(error.value)
    assert message == (
        "reward function infinite_reward returned inf for completion 0: expected a finite number or None "
        "(None: the function does not apply to that completion)"
    )
    assert trainer.state.global_step == 0
    assert all(torch.equal(old, new) for old, new in zip(before, trainer.model.parameters(), strict=True))


def test_an_async_reward_function_returning_too_few_rewards_is_named(tmp_path):
    with pytest.raises(RewardContractError, match=r"^reward function one_short_reward returned 3 rewards for 4 "):
        _trainer(tmp_path, one_short_reward).train()


def test_the_contract_counts_the_kept_rows_only(tmp_path):
    model, tokenizer = tiny_model_and_tokenizer()
    backend = TaggedBackend(tokenizer, empty_positions=frozenset({2}))  # the third group of each batch is dropped
    trainer = MaxEntGRPOTrainer(
        model=model,
        reward_funcs=one_short_reward,
        args=tiny_config(tmp_path, per_device_train_batch_size=12, generation_max_retries=0),
        train_dataset=letter_dataset(12),
        processing_class=tokenizer,
        generation_backend=backend,
    )
    with pytest.raises(RewardContractError, match=r"returned 7 rewards for 8 completions: expected one per"):
        trainer.train()


def test_rewards_that_keep_the_contract_train_under_trls_names(tmp_path):
    trainer = _trainer(tmp_path, [length_reward, async_length_reward])
    trainer.train()
    assert trainer.reward_func_names == ["length_reward", "async_length_reward"]
    logged = [entry for entry in trainer.state.log_history if "rewards/length_reward/mean" in entry]
    assert len(logged) == 2, trainer.state.log_history
    for entry in logged:
        assert entry["rewards/async_length_reward/mean"] == -entry["rewards/length_reward/mean"]


def always_none_reward(completions, **kwargs):
    return [None] * len(completions)


def test_all_none_rewards_warn_in_trls_words(tmp_path, caplog):
    # As TRL's own test_warning_raised_all_rewards_none, which a drop-in subclass passes.
    trainer = _trainer(tmp_path, always_none_reward, max_steps=1)
    with caplog.at_level("WARNING", logger="trl.trainer.grpo_trainer"):
        trainer.train()
    assert "All reward functions returned None for the following kwargs:" in caplog.text
    assert "kept completions scored None from every reward function" in caplog.text  # what the package adds
