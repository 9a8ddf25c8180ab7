"""beta > 0 with a model built in-process (no name to load it from): the reference model is its copy."""

from __future__ import annotations

import pytest
import torch

from maxent_grpo import MaxEntGRPOTrainer
from maxent_grpo.rewards import vowel_start_reward
from tests.support.training import letter_dataset, tiny_config, tiny_model_and_tokenizer

pytestmark = pytest.mark.slow


def test_reference_model_is_a_frozen_copy_of_the_initial_policy(tmp_path):
    model, tokenizer = tiny_model_and_tokenizer()
    initial = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}
    trainer = MaxEntGRPOTrainer(
        model=model,
        reward_funcs=vowel_start_reward,
        args=tiny_config(tmp_path, beta=0.1, kl_target=0.05, maxent_objective="listwise", max_steps=3),
        train_dataset=letter_dataset(16, with_answers=False),
        processing_class=tokenizer,
    )
    reference = trainer.accelerator.unwrap_model(trainer.ref_model)
    assert reference is not trainer.model
    trainer.train()

    reference_weights = dict(reference.named_parameters())
    assert all(torch.equal(initial[name], reference_weights[name]) for name in initial)  # never trained
    assert any(not torch.equal(initial[name], p) for name, p in trainer.model.named_parameters())  # the policy was
    kl = [entry["kl"] for entry in trainer.state.log_history if "kl" in entry]
    assert len(kl) == 3 and kl[0] == pytest.approx(0.0, abs=1e-6) and kl[-1] > 0  # measured against the copy
    beta = [entry["maxent/beta"] for entry in trainer.state.log_history if "maxent/beta" in entry]
    assert beta[-1] != 0.1  # the adaptive-KL controller moved beta
