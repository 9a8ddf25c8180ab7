"""LoRA through TRL's `peft_config`: on the tiny model the adapters train and the base weights stay where they were."""

from __future__ import annotations

import pytest
import torch
from peft import PeftModel
from trl import ModelConfig, get_peft_config

from maxent_grpo import MaxEntGRPOTrainer
from maxent_grpo.rewards import vowel_start_reward
from tests.support.training import letter_dataset, tiny_config, tiny_model_and_tokenizer

pytestmark = pytest.mark.slow


def _snapshot(model: torch.nn.Module, lora: bool) -> dict[str, torch.Tensor]:
    return {
        name: parameter.detach().clone() for name, parameter in model.named_parameters() if ("lora_" in name) == lora
    }


@pytest.mark.parametrize("beta", [0.0, 0.1], ids=["beta0", "beta0.1-adapter-off-reference"])
def test_lora_adapters_train_and_base_weights_do_not_move(tmp_path, beta):
    model, tokenizer = tiny_model_and_tokenizer()
    peft_config = get_peft_config(
        ModelConfig(use_peft=True, lora_r=4, lora_alpha=8, lora_target_modules=["q_proj", "v_proj"])
    )
    trainer = MaxEntGRPOTrainer(
        model=model,
        reward_funcs=vowel_start_reward,
        args=tiny_config(tmp_path, learning_rate=5e-2, max_steps=3, beta=beta, maxent_objective="listwise"),
        train_dataset=letter_dataset(16, with_answers=False),
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    assert isinstance(trainer.model, PeftModel)
    assert trainer.ref_model is None  # the reference is the base model with the adapter switched off
    base_before = _snapshot(trainer.model, lora=False)
    lora_before = _snapshot(trainer.model, lora=True)
    assert lora_before and all(".q_proj." in name or ".v_proj." in name for name in lora_before)

    trainer.train()

    base_after = _snapshot(trainer.model, lora=False)
    lora_after = _snapshot(trainer.model, lora=True)
    assert base_after.keys() == base_before.keys()
    assert all(torch.equal(base_before[name], base_after[name]) for name in base_before)
    moved = [name for name in lora_before if not torch.equal(lora_before[name], lora_after[name])]
    assert moved, "no LoRA weight changed"
    assert any("lora_B" in name for name in moved)  # lora_B starts at zero: the adapter's output really changed
