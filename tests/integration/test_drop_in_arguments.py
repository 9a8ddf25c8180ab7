"""`MaxEntGRPOTrainer` takes the `args` TRL's `GRPOTrainer` takes: None, a plain `GRPOConfig`, or its own config."""

from __future__ import annotations

import dataclasses

import pytest
from transformers import TrainingArguments
from trl import GRPOConfig, GRPOTrainer

from maxent_grpo import MaxEntGRPOConfig, MaxEntGRPOTrainer
from tests.support.training import letter_dataset, tiny_config, tiny_model_and_tokenizer

GRPO_FIELDS = {spec.name for spec in dataclasses.fields(GRPOConfig)}


def constant_reward(completions, **kwargs):
    return [1.0] * len(completions)


def _grpo_values(config) -> dict:
    return {key: value for key, value in config.to_dict().items() if key in GRPO_FIELDS}


def test_no_args_builds_the_default_grpo_trainer_builds(default_config_buildable):
    trainers = {}
    for trainer_class in (GRPOTrainer, MaxEntGRPOTrainer):
        model, tokenizer = tiny_model_and_tokenizer()
        model.config._name_or_path = "some-org/tiny-chat"
        trainers[trainer_class] = trainer_class(
            model=model, reward_funcs=constant_reward, train_dataset=letter_dataset(), processing_class=tokenizer
        )
    stock, ours = trainers[GRPOTrainer].args, trainers[MaxEntGRPOTrainer].args
    assert isinstance(ours, MaxEntGRPOConfig)
    assert ours.output_dir == stock.output_dir == "tiny-chat-GRPO"
    assert _grpo_values(ours) == _grpo_values(stock)
    assert ours.maxent_objective == "grpo"


def test_no_args_names_the_default_after_a_model_path(default_config_buildable, tiny_model_dir):
    _, tokenizer = tiny_model_and_tokenizer()
    trainer = MaxEntGRPOTrainer(
        str(tiny_model_dir), constant_reward, train_dataset=letter_dataset(), processing_class=tokenizer
    )
    assert isinstance(trainer.args, MaxEntGRPOConfig)
    assert trainer.args.output_dir == f"{tiny_model_dir.name}-GRPO"


@pytest.mark.parametrize("passed", ["keyword", "positional"])
def test_plain_grpo_config_keeps_its_values_and_trains(tmp_path, tiny_model_dir, passed):
    plain = tiny_config(
        tmp_path / "run", GRPOConfig, max_steps=1, learning_rate=3e-3, num_generations=2, beta=0.04, loss_type="bnpo"
    )
    model = str(tiny_model_dir)  # beta > 0 loads the reference model from the model's path
    _, tokenizer = tiny_model_and_tokenizer()
    rest = {"train_dataset": letter_dataset(), "processing_class": tokenizer}
    if passed == "keyword":
        trainer = MaxEntGRPOTrainer(model=model, reward_funcs=constant_reward, args=plain, **rest)
    else:
        trainer = MaxEntGRPOTrainer(model, constant_reward, plain, **rest)
    assert isinstance(trainer.args, MaxEntGRPOConfig)
    assert _grpo_values(trainer.args) == _grpo_values(plain)
    assert (trainer.args.output_dir, trainer.num_generations, trainer.beta, trainer.loss_type) == (
        str(tmp_path / "run"),
        2,
        0.04,
        "bnpo",
    )
    assert trainer.args.maxent_objective == "grpo" and trainer.args.generation_max_retries is None
    trainer.train()
    assert trainer.state.global_step == 1


def test_other_args_are_rejected_before_anything_loads(tmp_path):
    not_grpo = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    # A model id that cannot be loaded: reaching the model loader would raise OSError instead.
    with pytest.raises(TypeError, match=r"args must be a MaxEntGRPOConfig, a trl\.GRPOConfig or None, got Training"):
        MaxEntGRPOTrainer(model="no-such-org/no-such-model", reward_funcs=constant_reward, args=not_grpo)
    with pytest.raises(TypeError, match="got dict"):
        MaxEntGRPOTrainer("no-such-org/no-such-model", constant_reward, {"learning_rate": 1e-3})
