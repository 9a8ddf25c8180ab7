"""Scenarios of `probe_scenarios.py` (two gloo processes on CPU): tool-calling episodes across processes.

Each process holds 6 rows, groups have 4 (the middle group straddles the processes), and every episode plays
`FlakyGuessGame` through a `ScriptedGuesser` with its own script per process: process 0's guesses hang (past
``tool_timeout``) and raise far more often than process 1's, so the processes' episodes fail at different places.
`run(output_dir, policy)`, ``policy`` a ``tool_error_policy``. The record holds, per generation batch, this
process's keep masks and the backend calls it made.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator

from maxent_grpo import MaxEntGRPOTrainer
from maxent_grpo.tiny_model import build_tiny_model
from tests.support.guessing_game import (
    FlakyGuessGame,
    ScriptedGuesser,
    aligned_game_reward,
    game_dataset,
    game_tokenizer,
)
from tests.support.training import tiny_config

SCRIPTS = {0: (5, 7, 3, 5, 2, 7, 5, 9, 1), 1: (3, 2, 9, 1, 7)}


class RecordingTrainer(MaxEntGRPOTrainer):
    def _generate(self, prompts):
        calls_before = len(self.generation_backend.calls)
        result = super()._generate(prompts)
        self.records.append(
            {
                "keep": list(self._batch.keep),
                "global_keep": self._batch.global_keep.tolist(),
                "backend_calls": len(self.generation_backend.calls) - calls_before,
            }
        )
        return result


def run(output_dir: Path, policy: str) -> tuple[dict[str, Any], Accelerator]:
    """Train 3 steps with tool ``policy``; return this process's record and the accelerator."""
    tokenizer = game_tokenizer()
    model = build_tiny_model(tokenizer, max_position_embeddings=1024)
    args = tiny_config(
        output_dir,
        per_device_train_batch_size=6,
        num_generations=4,
        max_completion_length=128,
        max_steps=3,
        tool_timeout=0.5,
        tool_error_policy=policy,
        generation_max_retries=2,
    )
    trainer = RecordingTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[aligned_game_reward],
        args=args,
        train_dataset=game_dataset(24),
        environment_factory=FlakyGuessGame,
    )
    rank = trainer.accelerator.process_index
    trainer.generation_backend = ScriptedGuesser(tokenizer, script=SCRIPTS[rank])
    trainer.records = []
    trainer.train()
    logs = [
        {k: v for k, v in entry.items() if k.startswith(("generation/", "tools/"))}
        for entry in trainer.state.log_history
    ]
    out = {
        "rank": rank,
        "records": trainer.records,
        "logs": logs,
        "checksum": sum(p.detach().double().sum().item() for p in trainer.model.parameters()),
        "finite_params": all(torch.isfinite(p).all().item() for p in trainer.model.parameters()),
    }
    return out, trainer.accelerator
