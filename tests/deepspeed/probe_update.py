"""Run under `accelerate launch` with two gloo processes and a DeepSpeed ZeRO config (CPU): what one optimizer step
with dropped groups does to the weights and the optimizer state.

Usage: probe_update.py OUTPUT_DIR DEEPSPEED_CONFIG. Every run here trains the tiny model for two optimizer steps;
step 1 keeps every group, step 2 is the step under test. The data set repeats one prompt and both processes use the
same backend seed, so before any drop the two processes hold identical rows. Runs, each from the same weights:

- ``empty``: in step 2 every group on both processes comes back empty (AdamW, weight decay 0.1). Recorded: each
  process's ZeRO partition of the master weights and of the optimizer state after step 1 and after step 2, and the
  gathered parameters after each step.
- ``reference/<optimizer>/<loss_type>``: nothing is dropped. Both processes hold the same rows, so the engine's mean
  over processes is one process's stock TRL gradient: this is the update stock TRL makes on those rows alone (for
  dapo too: its normaliser counts the tokens of both processes and divides them by the process count).
- ``drop/<optimizer>/<loss_type>``: in step 2 process 1's groups all come back empty; process 0's rows are the
  reference's. The update must equal the reference's.

Process r writes rank<r>.json: per run, the gathered parameters after each step (flattened, as lists) and, for
``empty``, the local optimizer partitions.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import deepspeed
import torch
from datasets import Dataset
from transformers import TrainerCallback

from maxent_grpo import Completion, MaxEntGRPOTrainer
from maxent_grpo.cli.command import _end_training
from tests.support.tagged_backend import TaggedBackend
from tests.support.training import tiny_config, tiny_model_and_tokenizer

OPTIMIZERS = {"sgd": "sgd", "adamw": "adamw_torch"}
LOSS_TYPES = ("grpo", "dapo", "bnpo")
ROWS_PER_DEVICE = 8  # two whole groups of four per process


def digit_reward(completions: list[str], **kwargs: Any) -> list[float]:
    """Varies within a group (the tagged backend numbers its completions), so advantages are not all zero."""
    return [float(completion[-1]) for completion in completions]


class VaryingLengthBackend(TaggedBackend):
    """The tagged completions with 0 to 2 filler characters ("p0|--3"): rows of different lengths, so grpo (a mean
    per sequence), bnpo (a token mean per micro-batch) and dapo (a token mean over the generation batch) differ."""

    def _completion(self, prompt: str) -> Completion:
        tagged = super()._completion(prompt)
        text = tagged.text.replace("|", "|" + "-" * (self._counter % 3), 1)
        ids = [*self.tokenizer(text)["input_ids"], self.tokenizer.eos_token_id]
        return Completion(text=text, prompt_ids=tagged.prompt_ids, completion_ids=ids, logprobs=[-1.0] * len(ids))


def gathered_parameters(model: torch.nn.Module) -> list[float]:
    """Every parameter in full (collective under ZeRO-3: both processes call it), flattened in a fixed order."""
    parameters = list(model.parameters())
    with deepspeed.zero.GatheredParameters(parameters, modifier_rank=None):
        return torch.cat([p.detach().double().flatten() for p in parameters]).tolist()


def optimizer_partition(trainer: MaxEntGRPOTrainer) -> dict[str, Any]:
    """This process's ZeRO partition: the flat fp32 master weights the base optimizer steps, and its state."""
    zero = trainer.model_wrapped.optimizer  # the DeepSpeed engine's ZeRO optimizer
    # ZeRO-3 hands its flat partitions to the torch optimizer only for the duration of a step.
    flats = getattr(zero, "fp32_partitioned_groups_flat", None) or zero.single_partition_of_fp32_groups
    masters, state, steps = [], [], []
    for flat in flats:
        masters.append(flat.detach().double().flatten())
        for name, value in sorted(zero.optimizer.state.get(flat, {}).items()):
            if name == "step":
                steps.append(float(value))
            elif torch.is_tensor(value):
                state.append(value.detach().double().flatten())
    return {
        "masters": torch.cat(masters).tolist(),
        "state": torch.cat(state).tolist() if state else [],
        "steps": steps,
    }


class StepRecorder(TrainerCallback):
    """After each optimizer step: the gathered parameters (and, if asked, this process's optimizer partition); after
    step 1, the backend switches to its faults for step 2."""

    def __init__(self, trainer: MaxEntGRPOTrainer, step_two_empty: frozenset[int], record_optimizer: bool) -> None:
        self.trainer = trainer
        self.step_two_empty = step_two_empty
        self.record_optimizer = record_optimizer
        self.steps: list[dict[str, Any]] = []

    def on_step_end(self, args, state, control, **kwargs):
        model = self.trainer.model
        record: dict[str, Any] = {
            "zero_stage": self.trainer.accelerator.state.deepspeed_plugin.zero_stage,
            # Outside a gather, ZeRO-3 leaves every partitioned parameter empty on every process.
            "whole_parameters": sum(1 for p in model.parameters() if p.numel() > 0),
            "num_parameters": sum(1 for _ in model.parameters()),
            "parameters": gathered_parameters(model),
        }
        if self.record_optimizer:
            record["optimizer"] = optimizer_partition(self.trainer)
        self.steps.append(record)
        if state.global_step == 1:
            self.trainer.generation_backend.empty_positions = self.step_two_empty
        return control


def train_once(
    output_dir: Path,
    deepspeed_config: Path,
    optim: str,
    loss_type: str,
    empty_on: tuple[int, ...],
    record_optimizer: bool,
) -> tuple[Any, list[dict[str, Any]]]:
    """Two optimizer steps; in step 2 the processes in ``empty_on`` get back no completion for any group."""
    model, tokenizer = tiny_model_and_tokenizer()
    args = tiny_config(
        output_dir,
        per_device_train_batch_size=ROWS_PER_DEVICE,
        max_steps=2,
        loss_type=loss_type,
        optim=optim,
        weight_decay=0.1 if optim == "adamw_torch" else 0.0,  # SGD: the update is the gradient times the lr
        max_grad_norm=0.0,
        generation_max_retries=0,
        deepspeed=str(deepspeed_config),
        bf16=False,
    )
    dataset = Dataset.from_dict({"prompt": ["p0:"] * 16})  # one prompt: both processes' rows are alike
    trainer = MaxEntGRPOTrainer(
        model=model, reward_funcs=digit_reward, args=args, train_dataset=dataset, processing_class=tokenizer
    )
    rank = trainer.accelerator.process_index
    trainer.generation_backend = VaryingLengthBackend(tokenizer, seed=0)
    empty = frozenset(range(ROWS_PER_DEVICE)) if rank in empty_on else frozenset()
    recorder = StepRecorder(trainer, empty, record_optimizer)
    trainer.add_callback(recorder)
    trainer.train()
    steps = recorder.steps
    accelerator = trainer.accelerator
    del trainer
    return accelerator, steps


def main() -> None:
    output_dir, deepspeed_config = Path(sys.argv[1]), Path(sys.argv[2])
    runs: dict[str, list[dict[str, Any]]] = {}
    accelerator, runs["empty"] = train_once(
        output_dir / "empty", deepspeed_config, "adamw_torch", "grpo", (0, 1), True
    )
    for name, optim in OPTIMIZERS.items():
        for loss_type in LOSS_TYPES:
            for kind, empty_on in (("reference", ()), ("drop", (1,))):
                run_dir = output_dir / f"{kind}-{name}-{loss_type}"
                accelerator, runs[f"{kind}/{name}/{loss_type}"] = train_once(
                    run_dir, deepspeed_config, optim, loss_type, empty_on, False
                )
    rank = accelerator.process_index
    (output_dir / f"rank{rank}.json").write_text(json.dumps({"rank": rank, "runs": runs}))
    _end_training(accelerator)


if __name__ == "__main__":
    main()
