"""Small builders for tests that really train the tiny model."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from datasets import Dataset
from transformers import TrainerCallback

from maxent_grpo import MaxEntGRPOConfig
from maxent_grpo.tiny_model import build_tiny_model, build_tiny_tokenizer


def tiny_config(output_dir: Path | str, config_class: type = MaxEntGRPOConfig, **overrides: Any):
    """A CPU config for a few quick steps: 4 rows per device, groups of 4, 8-token completions."""
    fields: dict[str, Any] = {
        "output_dir": str(output_dir),
        "per_device_train_batch_size": 4,
        "num_generations": 4,
        "max_completion_length": 8,
        "max_steps": 2,
        "learning_rate": 1e-2,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "use_cpu": True,
        "seed": 0,
        "dataloader_num_workers": 0,
        "disable_tqdm": True,
    }
    fields.update(overrides)
    return config_class(**fields)


def tiny_model_and_tokenizer(seed: int = 0):
    tokenizer = build_tiny_tokenizer()
    return build_tiny_model(tokenizer, seed=seed), tokenizer


def letter_dataset(num_prompts: int = 8, with_answers: bool = True) -> Dataset:
    """Prompts "p<i>:" with an answer column naming the prompt index, so alignment can be checked."""
    data: dict[str, list] = {"prompt": [f"p{i}:" for i in range(num_prompts)]}
    if with_answers:
        data["answer"] = [f"p{i}" for i in range(num_prompts)]
    return Dataset.from_dict(data)


class AlignedTextReward:
    """Distinct characters of the completion; fails on a row whose prompt is not its answer's (`letter_dataset`)."""

    __name__ = "aligned_text"

    def __init__(self) -> None:
        self.rows_seen = 0

    def __call__(self, prompts, completions, answer, **kwargs):
        for prompt, answer_tag in zip(prompts, answer, strict=True):
            assert prompt == answer_tag + ":", f"misaligned row: prompt={prompt!r} answer={answer_tag!r}"
        self.rows_seen += len(prompts)
        return [float(len(set(completion))) for completion in completions]


def train_in_thread(trainer: Any, timeout: float) -> tuple[Any, list[BaseException]]:
    """Run ``trainer.train()`` on a daemon thread for at most ``timeout`` seconds; return the thread (alive: training
    hung) and what it raised (empty: it ended normally)."""
    errors: list[BaseException] = []

    def train() -> None:
        try:
            trainer.train()
        except BaseException as error:  # handed to the caller
            errors.append(error)

    worker = threading.Thread(target=train, daemon=True)
    worker.start()
    worker.join(timeout=timeout)
    return worker, errors


class TrainingLogs(TrainerCallback):
    """Every training step's log (those that hold a loss), in order, in ``logs``."""

    def __init__(self) -> None:
        self.logs: list[dict[str, float]] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is not None and "loss" in logs:
            self.logs.append(dict(logs))
