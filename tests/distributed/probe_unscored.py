"""A scenario of `probe_scenarios.py` (two gloo processes on CPU): the reward function fails on process 1 only, so
the rows it could not score leave the update on both processes alike (invariants I3 / I6 / I7 through scoring).

`run(output_dir)`. Each process holds six rows, groups of four: group 0 on process 0, group 1 straddling (rows 4-5 on
process 0, rows 6-7 on process 1), group 2 on process 1. The reward function raises `ConnectionError` on every call
on process 1 (``reward_retries=1``), so process 1's rows are unscored: group 2 leaves, group 1 keeps its two scored
rows (its baseline theirs alone). Each process records, per batch, the keep tables, the rewards and its advantages;
process 0 also the relative error between the gradient the optimizer receives (after DDP's average) and stock
`GRPOTrainer._compute_loss` on its own rows (all kept) on an unwrapped copy of the starting weights.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator, PartialState
from trl import GRPOTrainer

from tests.distributed.probe_gradient import GradientRecorder, one_process_collectives
from tests.support.tagged_backend import TaggedBackend
from tests.support.training import letter_dataset, tiny_config, tiny_model_and_tokenizer


class UnreachableFromProcessOne:
    """The completion's last digit; on process 1 every call raises `ConnectionError`."""

    __name__ = "remote_digit"

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, completions, **kwargs):
        self.calls += 1
        if PartialState().process_index == 1:
            raise ConnectionError("the scorer is unreachable from this process")
        return [float(completion[-1]) for completion in completions]


class BatchRecorder(GradientRecorder):
    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        batch = self._batch
        self.recorded.append(
            {
                "global_keep": batch.global_keep.tolist(),
                "keep": list(batch.keep),
                "rewards": [None if r != r else r for r in batch.rewards_per_func[:, 0].tolist()],
                "advantages": output["advantages"].tolist(),
            }
        )
        return output


def run(output_dir: Path) -> tuple[dict[str, Any], Accelerator]:
    """One optimizer step; return this process's record and the accelerator."""
    model, tokenizer = tiny_model_and_tokenizer()
    args = tiny_config(
        output_dir, per_device_train_batch_size=6, max_steps=1, max_grad_norm=0.0, reward_retries=1, loss_type="grpo"
    )
    reward = UnreachableFromProcessOne()
    trainer = BatchRecorder(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=letter_dataset(16),
        processing_class=tokenizer,
        generation_backend=None,
    )
    rank = trainer.accelerator.process_index
    trainer.generation_backend = TaggedBackend(tokenizer)
    trainer.recorded = []
    trainer.train()
    out: dict[str, Any] = {"rank": rank, "calls": reward.calls, "batches": trainer.recorded}
    out["logs"] = [{k: v for k, v in e.items() if k.startswith("scoring/")} for e in trainer.state.log_history]
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
    return out, trainer.accelerator
