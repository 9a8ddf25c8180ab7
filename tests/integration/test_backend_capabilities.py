"""A backend of your own, through the trainer: a capability of the wrong shape is refused when the trainer is built,
one it declares is used (`contract.capabilities`)."""

from __future__ import annotations

import dataclasses
import logging

import pytest
import torch

from maxent_grpo import MaxEntGRPOTrainer
from maxent_grpo.training.empty_batches import NoUsableGenerationError
from maxent_grpo.training.generation.contract import capabilities
from tests.support.tagged_backend import TaggedBackend
from tests.support.training import letter_dataset, tiny_config, tiny_model_and_tokenizer


def constant_reward(completions, **kwargs):
    return [1.0] * len(completions)


def _trainer(tmp_path, backend, **config):
    model, tokenizer = tiny_model_and_tokenizer()
    return MaxEntGRPOTrainer(
        model=model,
        reward_funcs=constant_reward,
        args=tiny_config(tmp_path, **config),
        train_dataset=letter_dataset(4),
        processing_class=tokenizer,
        generation_backend=backend,
    )


@dataclasses.dataclass
class WrongSync(TaggedBackend):
    def sync_weights(self, model, step):
        pass


def test_a_capability_of_the_wrong_shape_fails_when_the_trainer_is_built(tmp_path, tiny_tokenizer):
    with pytest.raises(
        TypeError,
        match=r"generation_backend WrongSync does not fit the backend protocol: WrongSync\.sync_weights has signature "
        r"\(model, step\), but the trainer calls it as sync_weights\(model\) \(see SupportsWeightSync\)\.",
    ):
        _trainer(tmp_path, WrongSync(tiny_tokenizer))


@dataclasses.dataclass
class Declared(TaggedBackend):
    """Every slot comes back missing, for a reason it gives; records the weight syncs and deadlines it is given, and
    counts syncs and calls in ``stats``."""

    synced: list = dataclasses.field(default_factory=list)
    deadlines: list = dataclasses.field(default_factory=list)
    stats: dict = dataclasses.field(
        default_factory=lambda: {"weight_pushes": 0, "weight_resyncs": 0, "stale_completions": 0}
    )
    reasons: tuple = ("the declared backend's own reason",)

    def sync_weights(self, model):
        self.synced.append(model)
        self.stats["weight_pushes"] += 1

    def set_deadline(self, deadline):
        self.deadlines.append(deadline)

    def generate(self, prompts, counts):
        self.stats["stale_completions"] += 1
        return [[] for _ in prompts]


def test_declared_capabilities_are_used_by_the_trainer(tmp_path, tiny_tokenizer):
    backend = Declared(tiny_tokenizer)
    trainer = _trainer(
        tmp_path,
        backend,
        max_steps=1,
        generation_step_timeout=60.0,
        generation_max_retries=0,
        generation_max_consecutive_empty_batches=1,
    )
    with pytest.raises(NoUsableGenerationError, match="the declared backend's own reason"):
        trainer.train()
    assert len(backend.synced) == 1 and isinstance(backend.synced[0], torch.nn.Module)
    assert len(backend.deadlines) == 2 and isinstance(backend.deadlines[0], float) and backend.deadlines[1] is None
    metrics = trainer._metrics["train"]
    assert metrics["generation/stale_completions"] == [1.0]  # one call
    assert metrics["generation/weight_pushes"] == [1.0]  # the sync that wrote the step's weights is the step's


def test_a_misspelt_capability_is_warned_about_when_the_trainer_is_built(tmp_path, tiny_tokenizer, caplog):
    @dataclasses.dataclass
    class Misspelt(TaggedBackend):
        def sync_weight(self, model):
            pass

    caplog.set_level(logging.WARNING, logger=capabilities.__name__)
    _trainer(tmp_path, Misspelt(tiny_tokenizer))
    assert "did you mean 'sync_weights'?" in caplog.text
