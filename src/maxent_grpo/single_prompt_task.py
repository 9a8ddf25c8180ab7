"""One prompt as the whole dataset, trained on by stock TRL GRPO or MaxEnt listwise from one seeded tiny model.

`maxent-grpo demo` is such a task ("pick a vowel:", `maxent_grpo.demo.TASK`): both trainers (`METHODS`) start from the
same initialisation of the tiny model (`maxent_grpo.tiny_model`) with the same settings, one group of
``num_generations`` completions per step on the CPU (`SinglePromptTask.build_trainer`), and the answers of each trained
model are sampled as in training (`SinglePromptTask.sample_answers`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from transformers import PreTrainedModel, PreTrainedTokenizerBase
from trl import GRPOTrainer

from maxent_grpo.answer_sampling import sample_completions
from maxent_grpo.cpu_trainer import TRAINERS, build_trainer, training_fields
from maxent_grpo.tiny_model import build_tiny_model, build_tiny_tokenizer

__all__ = ["METHODS", "SinglePromptTask"]

#: The two trainers a task's run is, in the order `maxent-grpo demo` runs them (`maxent_grpo.cpu_trainer.TRAINERS`).
METHODS = TRAINERS


@dataclass(frozen=True)
class SinglePromptTask:
    """One prompt as the whole dataset, one group of ``num_generations`` completions per step, on the CPU.

    ``alphabet`` is the tiny tokenizer's character set (None: printable ASCII); ``maxent_settings`` are the
    `MaxEntGRPOConfig` fields the MaxEnt runs add to ``maxent_objective="listwise"`` and ``maxent_mode_key``.
    """

    prompt: str
    mode_key: str
    alphabet: str | None = None
    maxent_settings: Mapping[str, Any] = field(default_factory=dict)
    num_generations: int = 16
    learning_rate: float = 3e-3
    hidden_size: int = 64
    num_layers: int = 1
    max_completion_length: int = 2
    temperature: float = 1.0
    beta: float = 0.0

    def untrained_model(self, seed: int) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        """The tiny model of the task's size, initialised from ``seed``, and its tokenizer over ``alphabet``: what
        both trainers of a seed start from."""
        tokenizer = build_tiny_tokenizer(self.alphabet)
        model = build_tiny_model(
            tokenizer,
            seed=seed,
            hidden_size=self.hidden_size,
            num_layers=self.num_layers,
            max_completion_length=self.max_completion_length,
        )
        return model, tokenizer

    def build_trainer(
        self,
        kind: str,
        seed: int,
        steps: int,
        maxent: Mapping[str, Any],
        output_dir: str,
        reward: Callable[..., list[float]],
        reporting: Mapping[str, Any] | None = None,
        trl_fields: Mapping[str, Any] | None = None,
    ) -> GRPOTrainer:
        """A stock TRL GRPO or MaxEnt listwise trainer from the seed's model.

        Args:
            kind: ``"grpo"`` or ``"maxent"`` (one of `METHODS`).
            seed: the seed of the model's initialisation and of the run.
            steps: optimizer steps (one group of ``num_generations`` completions each).
            maxent: overrides of the MaxEnt config's fields (on top of ``maxent_settings``); a GRPO run ignores them.
            output_dir: the trainer's output folder.
            reward: the reward function.
            reporting: overrides of the quiet logging both trainers run with by default (``report_to="none"``, one
                log at the end), e.g. ``{"report_to": "trackio", "logging_steps": 1, "run_name": ...}``.
            trl_fields: `GRPOConfig` fields the run adds to the task's settings, e.g. ``{"entropy_coef": 0.05}``.

        Returns:
            The trainer, not yet trained, with TRL's printing callback removed.

        Raises:
            ValueError: for a ``kind`` not in `METHODS`.
        """
        model, tokenizer = self.untrained_model(seed)
        fields = training_fields(
            output_dir,
            batch_size=self.num_generations,
            num_generations=self.num_generations,
            completion_length=self.max_completion_length,
            temperature=self.temperature,
            steps=steps,
            learning_rate=self.learning_rate,
            beta=self.beta,
            seed=seed,
        )
        fields |= {**(reporting or {}), **(trl_fields or {})}
        if kind == "maxent":
            fields |= {"maxent_objective": "listwise", "maxent_mode_key": self.mode_key, **self.maxent_settings}
            fields |= maxent
        return build_trainer(kind, model, tokenizer, reward, fields, [self.prompt] * self.num_generations)

    def sample_answers(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, num_samples: int, seed: int
    ) -> list[str]:
        """``num_samples`` completions of the prompt, sampled as in training; the global RNG is left untouched."""
        (answers,) = sample_completions(
            model,
            tokenizer,
            [self.prompt],
            num_samples,
            seed,
            max_new_tokens=self.max_completion_length,
            temperature=self.temperature,
        )
        return answers
