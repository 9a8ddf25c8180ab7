"""Stock TRL GRPO or MaxEnt listwise on the CPU, quiet, with the same fields: the two trainers `maxent-grpo demo`
compares.

Stock GRPO is TRL's `GRPOTrainer`, MaxEnt is `MaxEntGRPOTrainer` (`TRAINERS`). Both take the same `GRPOConfig` fields
(`training_fields`: no checkpoints, no reporting, one log at the end), and `build_trainer` builds either without TRL's
printing callback, the reference model of stock GRPO built from a model made in-process.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import nullcontext
from typing import Any

from datasets import Dataset
from transformers import PreTrainedModel, PreTrainedTokenizerBase, PrinterCallback
from trl import GRPOConfig, GRPOTrainer

from maxent_grpo.config import MaxEntGRPOConfig
from maxent_grpo.trainer import MaxEntGRPOTrainer
from maxent_grpo.training.reference_model import built_in_process, reference_from_policy

__all__ = ["TRAINERS", "build_trainer", "training_fields"]

#: The two trainers, in the order `maxent-grpo demo` runs them: stock TRL GRPO (``"grpo"``) and MaxEnt listwise
#: (``"maxent"``).
TRAINERS = ("grpo", "maxent")


def training_fields(
    output_dir: str,
    *,
    batch_size: int,
    num_generations: int,
    completion_length: int,
    temperature: float,
    steps: int,
    learning_rate: float,
    beta: float,
    seed: int,
) -> dict[str, Any]:
    """The `GRPOConfig` fields both trainers of a run take, before any of their own.

    Args:
        output_dir: the trainer's (scratch) output folder.
        batch_size: completions per optimizer step (``per_device_train_batch_size``).
        num_generations: completions per prompt.
        completion_length: ``max_completion_length``.
        temperature: the sampling temperature.
        steps: optimizer steps; the one log is at the last.
        learning_rate: the initial learning rate (TRL's linear decay).
        beta: the KL coefficient.
        seed: the run's seed.

    Returns:
        The fields, on the CPU, without checkpoints, reporting or progress bars.
    """
    return {
        "output_dir": output_dir,
        "per_device_train_batch_size": batch_size,
        "num_generations": num_generations,
        "max_completion_length": completion_length,
        "temperature": temperature,
        "max_steps": steps,
        "learning_rate": learning_rate,
        "beta": beta,
        "logging_steps": steps,
        "save_strategy": "no",
        "report_to": "none",
        "use_cpu": True,
        "seed": seed,
        "dataloader_num_workers": 0,
        "disable_tqdm": True,
    }


def build_trainer(
    kind: str,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    reward: Callable[..., list[float]],
    fields: Mapping[str, Any],
    prompts: list[str],
) -> GRPOTrainer:
    """A stock TRL GRPO (``kind="grpo"``) or MaxEnt (``kind="maxent"``) trainer, with TRL's printing callback removed.

    Args:
        kind: ``"grpo"`` or ``"maxent"`` (one of `TRAINERS`).
        model: the model to train.
        tokenizer: its tokenizer.
        reward: the reward function.
        fields: the config's fields (`training_fields` and the run's own `GRPOConfig` or `MaxEntGRPOConfig` fields).
        prompts: the training dataset's prompts.

    Returns:
        The trainer, not yet trained.

    Raises:
        ValueError: for a ``kind`` other than ``"grpo"`` and ``"maxent"``.
    """
    if kind not in TRAINERS:
        raise ValueError(f"kind={kind!r} is invalid: expected 'grpo' or 'maxent'")
    config_class, trainer_class = (
        (GRPOConfig, GRPOTrainer) if kind == "grpo" else (MaxEntGRPOConfig, MaxEntGRPOTrainer)
    )
    # Stock TRL builds the reference model of ``beta > 0`` only by name, which a model built in-process has not.
    reference = reference_from_policy(model) if kind == "grpo" and built_in_process(model) else nullcontext()
    with reference:
        trainer = trainer_class(
            model=model,
            reward_funcs=reward,
            args=config_class(**fields),
            train_dataset=Dataset.from_dict({"prompt": prompts}),
            processing_class=tokenizer,
        )
    trainer.remove_callback(PrinterCallback)
    return trainer
