"""A scenario of `probe_scenarios.py` (two gloo processes on CPU): a reward function that runs a collective (as a
judge model sharded across the processes would) while every group of process 1 is dropped.

`run(output_dir)`. Each process holds two whole groups; every group of process 1 comes back
empty. The reward of a completion is its last digit plus a hundredth of the rows scored on all processes together,
summed by an ``all_reduce`` in a process group whose timeout turns a process that skipped the call into an error
instead of a hang. Each process records the calls its reward function received and the rewards TRL
gathered.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from accelerate import Accelerator

from maxent_grpo import MaxEntGRPOTrainer
from tests.support.tagged_backend import rank_one_drops
from tests.support.training import letter_dataset, tiny_config, tiny_model_and_tokenizer


class CollectiveReward:
    __name__ = "collective_reward"

    def __init__(self) -> None:
        self.group = dist.new_group(backend="gloo", timeout=timedelta(seconds=60))
        self.calls: list[dict] = []

    def __call__(self, prompts, completions, completion_ids, answer, **kwargs):
        scored = torch.tensor([len(prompts)])
        dist.all_reduce(scored, group=self.group)
        self.calls.append(
            {"rows": len(prompts), "answer": list(answer), "completion_ids": list(completion_ids), "all": int(scored)}
        )
        return [float(completion[-1]) + int(scored) / 100 for completion in completions]


class RewardRecorder(MaxEntGRPOTrainer):
    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.recorded.append(
            {
                "rewards": self._batch.rewards_per_func[:, 0].tolist(),
                "texts": list(self._batch.texts),
                "global_keep": self._batch.global_keep.tolist(),
            }
        )
        return output


def run(output_dir: Path) -> tuple[dict[str, Any], Accelerator]:
    """Train 2 steps; return this process's record and the accelerator."""
    model, tokenizer = tiny_model_and_tokenizer()
    args = tiny_config(output_dir, per_device_train_batch_size=8, max_steps=2, generation_max_retries=1)
    reward = CollectiveReward()
    trainer = RewardRecorder(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=letter_dataset(16),
        processing_class=tokenizer,
        generation_backend=None,
    )
    rank = trainer.accelerator.process_index
    trainer.generation_backend = rank_one_drops(tokenizer, rank)
    trainer.recorded = []
    trainer.train()
    out = {"rank": rank, "calls": reward.calls, "batches": trainer.recorded}
    return out, trainer.accelerator
