"""Run under `accelerate launch --multi_gpu --num_processes 2` (CPU, gloo): a reward function that runs a collective
(as a judge model sharded across the processes would) while every group of process 1 is dropped.

Usage: probe_collective_reward.py OUTPUT_DIR. Each process holds two whole groups; every group of process 1 comes back
empty. The reward of a completion is its last digit plus a hundredth of the rows scored on all processes together,
summed by an ``all_reduce`` in a process group whose timeout turns a process that skipped the call into an error
instead of a hang. Each process writes rank<r>.json: the calls its reward function received and the rewards TRL
gathered.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from maxent_grpo import MaxEntGRPOTrainer
from maxent_grpo.cli.command import _end_training
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
                "rewards": self._last_rewards_per_func[:, 0].tolist(),
                "texts": list(self._last_completion_texts),
                "global_keep": self._global_row_keep.tolist(),
            }
        )
        return output


def main() -> None:
    output_dir = Path(sys.argv[1])
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
    (output_dir / f"rank{rank}.json").write_text(json.dumps(out))
    accelerator = trainer.accelerator
    del trainer
    _end_training(accelerator)


if __name__ == "__main__":
    main()
