"""`check_tied_output_layer`, and the trainer refusing a model whose tied output layer was split off its embedding."""

from __future__ import annotations

import pytest
import torch

from maxent_grpo import MaxEntGRPOTrainer
from maxent_grpo.tiny_model import build_tiny_model, build_tiny_tokenizer
from maxent_grpo.training.tied_embeddings import check_tied_output_layer
from tests.support.training import letter_dataset, tiny_config


def untied_copy_of_a_tied_model() -> torch.nn.Module:
    """What transformers' sharded loading leaves: the config still ties, the output layer holds a copy."""
    model = build_tiny_model(build_tiny_tokenizer())
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    return model


def test_a_tied_model_and_an_untied_one_pass():
    tokenizer = build_tiny_tokenizer()
    check_tied_output_layer(build_tiny_model(tokenizer))
    check_tied_output_layer(build_tiny_model(tokenizer, tie_word_embeddings=False))
    check_tied_output_layer(torch.nn.Linear(2, 2))  # no config: nothing to hold it to


def test_a_tie_the_config_promises_but_the_model_broke_is_refused():
    with pytest.raises(ValueError, match=r"tie_word_embeddings=True\), but they are two tensors"):
        check_tied_output_layer(untied_copy_of_a_tied_model())


def test_the_trainer_refuses_such_a_model_before_it_trains(tmp_path):
    with pytest.raises(ValueError, match="distributed_config"):
        MaxEntGRPOTrainer(
            model=untied_copy_of_a_tied_model(),
            reward_funcs=lambda completions, **kwargs: [0.0] * len(completions),
            args=tiny_config(tmp_path),
            train_dataset=letter_dataset(4),
            processing_class=build_tiny_tokenizer(),
        )
