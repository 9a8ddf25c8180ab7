"""A scenario of `probe_scenarios.py` (two gloo processes on CPU): the DDP gradient when one process's groups are all
dropped equals stock TRL's gradient on the other process's kept rows alone.

`run(output_dir, loss_type)`. Each process holds two whole groups; every group of process 1 comes back empty.
Process 0 records the relative error between the gradient the optimizer receives (after DDP's average)
and stock `GRPOTrainer._compute_loss` on its micro-batch, computed on an unwrapped copy of the starting weights.
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from trl import GRPOTrainer

from maxent_grpo import MaxEntGRPOTrainer
from tests.support.tagged_backend import rank_one_drops
from tests.support.training import letter_dataset, tiny_config, tiny_model_and_tokenizer


def digit_reward(completions, **kwargs):
    return [float(completion[-1]) for completion in completions]


class GradientRecorder(MaxEntGRPOTrainer):
    def _compute_loss(self, model, inputs):
        self.micro_batch = {k: v.detach().clone() if torch.is_tensor(v) else v for k, v in inputs.items()}
        self.start = copy.deepcopy(self.accelerator.unwrap_model(model).state_dict())
        return super()._compute_loss(model, inputs)

    def _get_grad_norm(self, model, grad_norm=None):  # the window's final gradient, before the optimizer steps
        unwrapped = self.accelerator.unwrap_model(model)
        self.gradient = {n: p.grad.detach().clone() for n, p in unwrapped.named_parameters()}
        return super()._get_grad_norm(model, grad_norm=grad_norm)


@contextlib.contextmanager
def one_process_collectives(accelerator):
    """TRL's loss on this process alone: its metric collectives become local."""
    accelerator.gather = lambda tensor: tensor.reshape(1) if tensor.ndim == 0 else tensor
    accelerator.reduce = lambda tensor, *args, **kwargs: tensor
    try:
        yield
    finally:
        del accelerator.gather, accelerator.reduce


def run(output_dir: Path, loss_type: str) -> tuple[dict[str, Any], Accelerator]:
    """One optimizer step with ``loss_type``; return this process's record and the accelerator."""
    model, tokenizer = tiny_model_and_tokenizer()
    args = tiny_config(output_dir, per_device_train_batch_size=8, max_steps=1, loss_type=loss_type, max_grad_norm=0.0)
    trainer = GradientRecorder(
        model=model,
        reward_funcs=digit_reward,
        args=args,
        train_dataset=letter_dataset(16),
        processing_class=tokenizer,
        generation_backend=None,
    )
    rank = trainer.accelerator.process_index
    trainer.generation_backend = rank_one_drops(tokenizer, rank)
    trainer.train()
    out: dict[str, Any] = {"rank": rank, "kept": int(trainer.micro_batch["row_keep"].sum())}
    if rank == 0:
        reference = copy.deepcopy(trainer.accelerator.unwrap_model(trainer.model))
        reference.load_state_dict(trainer.start)
        reference.train()
        with one_process_collectives(trainer.accelerator):
            GRPOTrainer._compute_loss(trainer, reference, trainer.micro_batch).backward()
        names = [n for n, p in reference.named_parameters() if p.grad is not None]
        expected = torch.cat([reference.get_parameter(n).grad.flatten() for n in names])
        actual = torch.cat([trainer.gradient[n].flatten() for n in names])
        out["relative_error"] = ((actual - expected).norm() / expected.norm()).item()
        out["norm_ratio"] = (actual.norm() / expected.norm()).item()
    return out, trainer.accelerator
