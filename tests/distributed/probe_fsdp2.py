"""Run under `accelerate launch --multi_gpu --num_processes 2` (CPU, gloo): what one optimizer step with dropped
groups does under FSDP2 (the runs of `tests.support.two_step_update`).

Usage: probe_fsdp2.py OUTPUT_DIR MODEL_DIR. The model is sharded when it is loaded (transformers'
``DistributedConfig(fsdp_size=2)``: DTensor parameters, each process holding half), the way FSDP runs on CPU, where
accelerate does not enable its FSDP plugin. The snapshot after each step holds the parameters in full and this
process's shards of the parameters and of the torch optimizer's state.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch.distributed.tensor import DTensor
from transformers import AutoModelForCausalLM
from transformers.distributed import DistributedConfig

from maxent_grpo import MaxEntGRPOTrainer
from maxent_grpo.tiny_model import build_tiny_tokenizer
from tests.support.two_step_update import run_all, train_two_steps


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


if __name__ == "__main__":
    run_all(Path(sys.argv[1]), partial(train, sys.argv[2]))
