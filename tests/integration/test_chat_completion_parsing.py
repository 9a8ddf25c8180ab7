"""Reward functions receive conversational completions from MaxEntGRPOTrainer exactly as stock GRPOTrainer builds them.

The tokenizer carries TRL's response template for a Qwen3.5-style thinking chat template, whose generation prompt
opens ``<think>``: stock TRL parses each completion into ``reasoning_content`` and ``content``.
"""

from __future__ import annotations

import pytest
from trl import GRPOConfig, GRPOTrainer

from maxent_grpo import MaxEntGRPOConfig, MaxEntGRPOTrainer
from maxent_grpo.tiny_model import build_tiny_model
from tests.support.chat import chat_dataset, reasoning_tokenizer
from tests.support.training import tiny_config

pytestmark = pytest.mark.slow


def _completions_seen(trainer_class, config_class, output_dir) -> list:
    seen: list = []

    def record(prompts, completions, **kwargs):
        seen.extend(completions)
        return [float(len(c[0]["content"]) + len(c[0].get("reasoning_content", ""))) for c in completions]

    tokenizer = reasoning_tokenizer("qwen3_5_think")
    trainer = trainer_class(
        model=build_tiny_model(tokenizer, seed=0),
        reward_funcs=record,
        args=tiny_config(output_dir, config_class, max_steps=2),
        train_dataset=chat_dataset(4),
        processing_class=tokenizer,
    )
    trainer.train()
    return seen


def test_reward_functions_see_the_completions_stock_trl_parses(tmp_path):
    stock = _completions_seen(GRPOTrainer, GRPOConfig, tmp_path / "stock")
    ours = _completions_seen(MaxEntGRPOTrainer, MaxEntGRPOConfig, tmp_path / "ours")
    assert len(stock) == 2 * 4  # steps x rows
    assert ours == stock  # same messages, keys included
    assert all("reasoning_content" in completion[0] for completion in stock)
