"""With the default TransformersBackend and no faults, MaxEntGRPOTrainer trains exactly like stock GRPOTrainer."""

from __future__ import annotations

import pytest
from trl import GRPOConfig, GRPOTrainer

from maxent_grpo import MaxEntGRPOConfig, MaxEntGRPOTrainer
from tests.support.training import letter_dataset, tiny_config, tiny_model_and_tokenizer

pytestmark = pytest.mark.slow


def _run(trainer_class, config_class, output_dir):
    seen: list[tuple[str, str, float]] = []

    def count_vowels(prompts, completions, **kwargs):
        rewards = [float(sum(ch in "aeiou" for ch in c)) for c in completions]
        seen.extend(zip(prompts, completions, rewards, strict=True))
        return rewards

    model, tokenizer = tiny_model_and_tokenizer(seed=0)
    args = tiny_config(output_dir, config_class, max_steps=3, gradient_accumulation_steps=2)
    trainer = trainer_class(
        model=model, reward_funcs=count_vowels, args=args, train_dataset=letter_dataset(8), processing_class=tokenizer
    )
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    params = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    return seen, losses, params, trainer.state.log_history


def test_same_completions_rewards_loss_and_weights_as_stock(tmp_path):
    stock = _run(GRPOTrainer, GRPOConfig, tmp_path / "stock")
    ours = _run(MaxEntGRPOTrainer, MaxEntGRPOConfig, tmp_path / "ours")
    assert len(stock[0]) == len(ours[0]) == 3 * 2 * 4  # steps x accumulation x rows
    assert ours[0] == stock[0]  # same prompts, completions and rewards, row by row
    assert ours[1] == pytest.approx(stock[1], abs=1e-6)
    for name, value in stock[2].items():
        assert (ours[2][name] - value).abs().max().item() <= 1e-6, name
    stock_metrics = {k: v for entry in stock[3] for k, v in entry.items() if k.startswith(("completions/", "reward"))}
    ours_metrics = {k: v for entry in ours[3] for k, v in entry.items() if k.startswith(("completions/", "reward"))}
    assert ours_metrics == pytest.approx(stock_metrics, abs=1e-6)
    generation = [entry for entry in ours[3] if "generation/dropped_prompts" in entry]
    assert generation and all(entry["generation/dropped_prompts"] == 0 for entry in generation)
