"""Run under `accelerate launch --multi_gpu --num_processes 2` (CPU, gloo) with vLLM installed: colocate training.

Each process builds its own vLLM engine through TRL and trains 3 steps in float32. Usage: probe_colocate.py
OUTPUT_DIR MODEL_DIR. Each process writes rank<r>.json: the logged `sampling/sampling_logp_difference/mean` per step
and the rows the reward function saw.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from transformers import TrainerCallback

from maxent_grpo import MaxEntGRPOTrainer
from maxent_grpo.cli.command import _end_training
from tests.support.training import AlignedTextReward, letter_dataset, tiny_config


class LogpDifferences(TrainerCallback):
    def __init__(self) -> None:
        self.values: list[float] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is not None and "sampling/sampling_logp_difference/mean" in logs:
            self.values.append(logs["sampling/sampling_logp_difference/mean"])


def train(output_dir: Path, model_dir: str):
    differences, reward = LogpDifferences(), AlignedTextReward()
    config = tiny_config(
        output_dir,
        max_steps=3,
        per_device_train_batch_size=6,  # groups of 4 straddle the two processes
        learning_rate=5e-2,
        bf16=False,
        use_vllm=True,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=0.3,
        vllm_max_model_length=128,
    )
    trainer = MaxEntGRPOTrainer(
        model=model_dir,
        reward_funcs=reward,
        args=config,
        train_dataset=letter_dataset(24),
        callbacks=[differences],
    )
    trainer.train()
    record = {"logp_differences": differences.values, "rows_seen": reward.rows_seen}
    (output_dir / f"rank{trainer.accelerator.process_index}.json").write_text(json.dumps(record))
    return trainer.accelerator


if __name__ == "__main__":
    _end_training(train(Path(sys.argv[1]), sys.argv[2]))  # the trainer is gone by now
