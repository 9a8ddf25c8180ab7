"""A scenario of `probe_scenarios.py` (two gloo processes on CPU): what one optimizer step with dropped groups does
under FSDP2 (the runs of `tests.support.two_step_update`).

`run(output_dir, model_dir)`. The model is sharded when it is loaded (transformers'
``DistributedConfig(fsdp_size=2)``: DTensor parameters, each process holding half), the way FSDP runs on CPU, where
accelerate does not enable its FSDP plugin. The snapshot after each step holds the parameters in full and this
process's shards of the parameters and of the torch optimizer's state. The record holds every run's snapshots.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from torch.distributed.tensor import DTensor
from transformers import AutoModelForCausalLM
from transformers.distributed import DistributedConfig

from maxent_grpo import MaxEntGRPOTrainer
from maxent_grpo.tiny_model import build_tiny_tokenizer
from tests.support.two_step_update import train_all, train_two_steps


def local(tensor: torch.Tensor) -> torch.Tensor:
    return (tensor.to_local() if isinstance(tensor, DTensor) else tensor).detach().double().flatten()


def snapshot(trainer: MaxEntGRPOTrainer) -> dict[str, Any]:
    parameters = list(trainer.model.parameters())
    optimizer = trainer.optimizer.optimizer  # accelerate's AcceleratedOptimizer -> the torch optimizer
    masters, state, steps = [], [], []
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            masters.append(local(parameter))
            for name, value in sorted(optimizer.state.get(parameter, {}).items()):
                if name == "step":
                    steps.append(float(value))
                elif torch.is_tensor(value):
                    state.append(local(value))
    full = [p.full_tensor() if isinstance(p, DTensor) else p for p in parameters]  # collective
    return {
        "sharded_parameters": sum(isinstance(p, DTensor) for p in parameters),
        "num_parameters": len(parameters),
        "parameters": torch.cat([p.detach().double().flatten() for p in full]).tolist(),
        "optimizer": {
            "masters": torch.cat(masters).tolist(),
            "state": torch.cat(state).tolist() if state else [],
            "steps": steps,
        },
    }


def train(model_dir: str, output_dir: Path, optim: str, loss_type: str, empty_on: tuple[int, ...]):
    model = AutoModelForCausalLM.from_pretrained(model_dir, distributed_config=DistributedConfig(fsdp_size=2))
    return train_two_steps(model, build_tiny_tokenizer(), output_dir, optim, loss_type, empty_on, snapshot)


def run(output_dir: Path, model_dir: str) -> tuple[dict[str, Any], Accelerator]:
    """Every run of `tests.support.two_step_update` under FSDP2; return this process's record and the accelerator."""
    accelerator, runs = train_all(output_dir, partial(train, model_dir))
    return {"rank": accelerator.process_index, "runs": runs}, accelerator
