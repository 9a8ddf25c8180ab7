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


def test_stock_grpo_with_beta_measures_kl_against_a_copy_of_its_base(tmp_path):
    # TRL's own GRPOTrainer (which builds a reference model only by name) with beta > 0, from a base model built
    # in-process, as `maxent_grpo.cpu_trainer` builds it (the held-out benchmarks' grpo_kl arm).
    from maxent_grpo.cpu_trainer import build_trainer, training_fields

    model, tokenizer = tiny_model_and_tokenizer()
    initial = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}
    fields = training_fields(
        str(tmp_path),
        batch_size=8,
        num_generations=4,
        completion_length=4,
        temperature=1.0,
        steps=3,
        learning_rate=1e-2,
        beta=0.0,
        seed=0,
    )
    fields = {**fields, "beta": 0.3, "logging_steps": 1}
    prompts = letter_dataset(16, with_answers=False)["prompt"]
    trainer = build_trainer("grpo", model, tokenizer, vowel_start_reward, fields, prompts)
    assert type(trainer).__name__ == "GRPOTrainer" and trainer.beta == 0.3
    trainer.train()
    reference = trainer.accelerator.unwrap_model(trainer.ref_model)
    assert all(torch.equal(initial[name], p) for name, p in reference.named_parameters())
    kl = [entry["kl"] for entry in trainer.state.log_history if "kl" in entry]
    assert len(kl) == 3 and kl[0] == pytest.approx(0.0, abs=1e-6) and kl[-1] > 0
