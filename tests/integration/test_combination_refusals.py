"""Combinations of trainer arguments refused before anything is loaded (`training.combination_checks`): generating
ahead where its guarantees cannot hold (the config refuses the fields it can judge alone: tests/unit/test_config.py),
and image data with the vLLM backends, which would leave the images out."""

from __future__ import annotations

import importlib.util

import pytest

from maxent_grpo import MaxEntGRPOTrainer
from maxent_grpo.training.generation.contract.protocol import Completion
from tests.support.training import letter_dataset, tiny_config, tiny_model_and_tokenizer


class FixedBackend:
    def generate(self, prompts, counts):
        return [[Completion("a", [1], [2]) for _ in range(count)] for count in counts]


def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: the first.
        b: the second.
    """
    return a + b


def _reward(completions, **kwargs):
    return [1.0] * len(completions)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"generation_backend": FixedBackend()}, "needs the built-in vLLM server backend"),
        ({"rollout_func": lambda prompts, trainer: {}}, "needs the built-in vLLM server backend"),
        ({"tools": [add]}, "not supported with `tools` or `environment_factory`"),
    ],
)
def test_async_generation_refuses_what_cannot_report_weight_versions_or_runs_collective_turns(
    tmp_path, given, message
):
    model, tokenizer = tiny_model_and_tokenizer()
    config = tiny_config(
        tmp_path, use_vllm=True, vllm_mode="server", vllm_weight_transfer="disk", async_generation=True
    )
    with pytest.raises(ValueError, match=message):
        MaxEntGRPOTrainer(
            model=model,
            reward_funcs=_reward,
            args=config,
            train_dataset=letter_dataset(),
            processing_class=tokenizer,
            **given,
        )


@pytest.mark.parametrize("column", ["image", "images"])
def test_image_data_is_refused_with_the_vllm_backends_that_would_leave_the_images_out(tmp_path, column):
    from datasets import Dataset

    model, tokenizer = tiny_model_and_tokenizer()
    data = Dataset.from_dict({"prompt": [[{"role": "user", "content": "p0:"}]] * 4, column: [None] * 4})
    config = tiny_config(tmp_path, use_vllm=True, vllm_mode="server", vllm_weight_transfer="disk")
    with pytest.raises(ValueError, match=f"the training data has an '{column}' column, but .* text only"):
        MaxEntGRPOTrainer(
            model=model, reward_funcs=_reward, args=config, train_dataset=data, processing_class=tokenizer
        )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"num_iterations": 2}, r"trained over 2 optimizer steps .* set max_staleness >= 2"),
        ({"steps_per_generation": 3, "gradient_accumulation_steps": 2}, "line up with optimizer steps"),
    ],
)
def test_async_generation_refuses_generations_trained_longer_than_max_staleness_allows(tmp_path, overrides, message):
    model, tokenizer = tiny_model_and_tokenizer()
    config = tiny_config(
        tmp_path, use_vllm=True, vllm_mode="server", vllm_weight_transfer="disk", async_generation=True, **overrides
    )
    with pytest.raises(ValueError, match=message):
        MaxEntGRPOTrainer(
            model=model, reward_funcs=_reward, args=config, train_dataset=letter_dataset(), processing_class=tokenizer
        )


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"vllm_mode": "colocate"}, r"use_vllm=True \(vllm_mode='colocate'\) needs vLLM, which is not installed"),
        ({"vllm_mode": "server", "vllm_weight_transfer": "nccl"}, "NCCL communicator, which needs vLLM"),
    ],
    ids=["colocate", "server-nccl"],
)
def test_vllm_where_this_environment_needs_it_and_lacks_it_is_refused_before_the_model_loads(
    tmp_path, fields, message
):
    # A model name that does not exist: a refusal after anything started loading would be another error.
    config = tiny_config(tmp_path, use_vllm=True, **fields)
    with pytest.raises(ImportError, match=message):
        MaxEntGRPOTrainer(model="no-such-org/no-such-model", reward_funcs=_reward, args=config)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
@pytest.mark.parametrize("transfer", ["disk", "auto"])  # 'auto' is the disk transfer on a CPU trainer
def test_server_mode_with_the_disk_transfer_needs_no_vllm_here(tmp_path, transfer):
    from maxent_grpo.training.generation.backends.selection import vllm_install_problem

    config = tiny_config(tmp_path, use_vllm=True, vllm_mode="server", vllm_weight_transfer=transfer)
    assert vllm_install_problem(config) is None
