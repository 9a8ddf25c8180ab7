"""A base model pre-trained in-process, and the RL runs that start from it, in the held-out benchmarks.

`benchmarks/reasoning_boundary.py` and `benchmarks/multi_token_answers.py` compare methods from a pretrained base, as
RL is used on real models: per seed, the tiny offline model (`maxent_grpo.tiny_model`) is fitted by a short
supervised run on a synthetic corpus of the task's training prompts (`pretrain_base`), and every method trains a copy
of it with the same budget and settings (`train_from_base`): stock TRL `GRPOTrainer` with the `GRPOConfig` fields of
a TRL arm, or `MaxEntGRPOTrainer` with its MaxEnt fields (`maxent_grpo.cpu_trainer`).
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from maxent_grpo.cpu_trainer import build_trainer, training_fields
from maxent_grpo.tiny_model import build_tiny_model

__all__ = ["pretrain_base", "train_from_base"]


def pretrain_base(
    tokenizer: PreTrainedTokenizerBase,
    corpus: Sequence[tuple[str, str]],
    *,
    seed: int,
    hidden_size: int,
    num_layers: int,
    completion_length: int,
    steps: int,
    batch: int,
    learning_rate: float,
    append_eos: bool = False,
) -> PreTrainedModel:
    """The seed's base model: the tiny model after a short supervised run on ``corpus``, the loss on completions only.

    Args:
        tokenizer: the task's character tokenizer.
        corpus: (prompt, completion) pairs whose prompts have one length and whose completions another.
        seed: the model's initialisation and the order of the batches.
        hidden_size: the model's hidden size.
        num_layers: the model's decoder layers.
        completion_length: the tokens of a completion, the EOS token included when ``append_eos``; also the
            model's ``max_new_tokens``.
        steps: AdamW steps, each on ``batch`` examples drawn with replacement.
        batch: examples per step.
        learning_rate: AdamW's learning rate (constant).
        append_eos: whether the model also learns to stop, the EOS token appended to every completion.

    Returns:
        The model, in eval mode.
    """
    model = build_tiny_model(
        tokenizer, seed=seed, hidden_size=hidden_size, num_layers=num_layers, max_completion_length=completion_length
    )
    eos = [tokenizer.eos_token_id] if append_eos else []
    ids = torch.tensor([tokenizer(prompt + completion)["input_ids"] + eos for prompt, completion in corpus])
    labels = ids.clone()
    labels[:, : ids.shape[1] - completion_length] = -100
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        rows = torch.randint(len(corpus), (batch,), generator=generator)
        loss = model(input_ids=ids[rows], labels=labels[rows]).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    return model


def train_from_base(
    base: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    kind: str,
    settings: Mapping[str, Any],
    *,
    prompts: Sequence[str],
    reward: Callable[..., list[float]],
    seed: int,
    steps: int,
    prompts_per_step: int,
    num_generations: int,
    completion_length: int,
    learning_rate: float,
) -> PreTrainedModel:
    """A copy of ``base`` trained on ``prompts`` by stock GRPO (``kind="grpo"``) or MaxEnt (``kind="maxent"``).

    Both run on the CPU with the same fields: ``steps`` optimizer steps of ``prompts_per_step`` prompts x
    ``num_generations`` completions of at most ``completion_length`` tokens, sampled at temperature 1, β = 0,
    ``learning_rate`` with TRL's linear decay; ``settings`` adds the arm's `GRPOConfig` or `MaxEntGRPOConfig` fields.

    Args:
        base: the seed's base model (left untouched).
        tokenizer: its tokenizer.
        kind: ``"grpo"`` or ``"maxent"`` (see `maxent_grpo_experiments.trl_baselines.trainer_kind`).
        settings: the arm's config fields.
        prompts: the training prompts (the dataset; TRL draws ``prompts_per_step`` of them per step).
        reward: the reward function (e.g. a `maxent_grpo_experiments.step_recorder.StepRecorder`).
        seed: the trainer's seed (its data order and sampling).
        steps: optimizer steps.
        prompts_per_step: prompt groups per optimizer step.
        num_generations: completions per prompt.
        completion_length: ``max_completion_length``.
        learning_rate: the initial learning rate.

    Returns:
        The trained model.

    Raises:
        ValueError: for a ``kind`` other than ``"grpo"`` and ``"maxent"``.
    """
    with tempfile.TemporaryDirectory() as output_dir:
        fields = training_fields(
            output_dir,
            batch_size=prompts_per_step * num_generations,
            num_generations=num_generations,
            completion_length=completion_length,
            temperature=1.0,
            steps=steps,
            learning_rate=learning_rate,
            beta=0.0,
            seed=seed,
        )
        trainer = build_trainer(kind, copy.deepcopy(base), tokenizer, reward, {**fields, **settings}, list(prompts))
        trainer.train()
    return trainer.model
