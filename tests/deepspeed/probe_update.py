"""The update section of `probe_zero` (two gloo processes under DeepSpeed ZeRO on CPU): what one optimizer step with
dropped groups does to the weights and the optimizer state (the runs of `tests.support.two_step_update`).

The snapshot after each step holds the parameters gathered in full and this process's ZeRO partition: the flat fp32
master weights the torch optimizer steps, and its state. `run` has process r write OUTPUT_DIR/rank<r>.json.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import deepspeed
import torch

from maxent_grpo import MaxEntGRPOTrainer
from tests.support.training import tiny_model_and_tokenizer
from tests.support.two_step_update import train_all, train_two_steps


def zero_partition(trainer: MaxEntGRPOTrainer) -> dict[str, Any]:
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


def snapshot(trainer: MaxEntGRPOTrainer) -> dict[str, Any]:
    parameters = list(trainer.model.parameters())
    record: dict[str, Any] = {
        "zero_stage": trainer.accelerator.state.deepspeed_plugin.zero_stage,
        # Outside a gather, ZeRO-3 leaves every partitioned parameter empty on every process.
        "whole_parameters": sum(1 for p in parameters if p.numel() > 0),
        "num_parameters": len(parameters),
        "optimizer": zero_partition(trainer),
    }
    with deepspeed.zero.GatheredParameters(parameters, modifier_rank=None):  # collective under ZeRO-3
        record["parameters"] = torch.cat([p.detach().double().flatten() for p in parameters]).tolist()
    return record


def train(deepspeed_config: Path, output_dir: Path, optim: str, loss_type: str, empty_on: tuple[int, ...]):
    model, tokenizer = tiny_model_and_tokenizer()
    return train_two_steps(
        model, tokenizer, output_dir, optim, loss_type, empty_on, snapshot, deepspeed=str(deepspeed_config), bf16=False
    )


def run(output_dir: Path, deepspeed_config: Path) -> Any:
    """Every run of `tests.support.two_step_update`; each process writes ``output_dir``/rank<r>.json. Returns the
    last run's accelerator."""
    accelerator, runs = train_all(output_dir, partial(train, deepspeed_config))
    rank = accelerator.process_index
    (output_dir / f"rank{rank}.json").write_text(json.dumps({"rank": rank, "runs": runs}))
    return accelerator
