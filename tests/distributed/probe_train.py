"""Scenarios of `probe_scenarios.py` (two gloo processes on CPU): the alignment probe across processes.

Each process holds 6 rows and groups have 4, so the middle group of every generation batch straddles the two
processes. `run(output_dir, mode)`, one of `MODES`: "straddle" (process 1 never completes its part of the straddling
group, no retries), "faults" (random faults with retries, listwise objective), "dynamic" (dynamic sampling with a
reward that is constant for even prompts, with faults) or "one_rank_faults" (faults on process 0 only, dynamic
sampling, two generation batches per optimizer step). The record holds, per generation batch, the keep masks and the
backend calls it made.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator

from maxent_grpo import MaxEntGRPOTrainer
from tests.integration.test_alignment_probe import AlignmentReward
from tests.support.tagged_backend import TaggedBackend
from tests.support.training import letter_dataset, tiny_config, tiny_model_and_tokenizer

MODES = ("straddle", "faults", "dynamic", "one_rank_faults")


class EvenPromptsConstantReward(AlignmentReward):
    """The alignment probe, with reward 0 for every completion of an even-numbered prompt."""

    def __call__(self, prompts, completions, completion_ids, answer, **kwargs):
        rewards = super().__call__(prompts, completions, completion_ids, answer, **kwargs)
        rows = zip(prompts, completions, rewards, strict=True)
        return [0.0 if int(p[1:-1]) % 2 == 0 else r + int(c[-1]) for p, c, r in rows]


class RecordingTrainer(MaxEntGRPOTrainer):
    """Records, per generation batch, the local and global keep masks this process computed, and the advantages of
    its rows."""

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.advantages.append(output["advantages"].tolist())
        return output

    def _generate(self, prompts):
        calls_before = len(self.generation_backend.calls)
        result = super()._generate(prompts)
        self.records.append(
            {
                "prompts": list(prompts),
                "keep": list(self._batch.keep),
                "global_keep": self._batch.global_keep.tolist(),
                "backend_calls": len(self.generation_backend.calls) - calls_before,
            }
        )
        return result


def run(output_dir: Path, mode: str) -> tuple[dict[str, Any], Accelerator]:
    """Train 4 steps in ``mode``; return this process's record and the accelerator."""
    model, tokenizer = tiny_model_and_tokenizer()
    args = tiny_config(
        output_dir,
        per_device_train_batch_size=6,
        num_generations=4,
        max_steps=4,
        generation_max_retries=0 if mode == "straddle" else 2,
        generation_max_consecutive_empty_batches=4,
        maxent_objective="listwise" if mode == "faults" else "grpo",
        # The tagged completions "p<i>|<n>" of a group are mostly distinct answers: several modes per group, so the
        # policy correction (an extra forward, gathered log-probs and completion hashes) shapes the advantages.
        maxent_mode_key="last_line" if mode == "faults" else None,
        maxent_mode_probability="policy" if mode == "faults" else "count",
        dynamic_sampling=mode in ("dynamic", "one_rank_faults"),
        dynamic_sampling_max_rounds=12,
        gradient_accumulation_steps=2 if mode == "one_rank_faults" else 1,
        steps_per_generation=1 if mode == "one_rank_faults" else None,  # two generation batches per optimizer step
        # Exercise, across processes holding different kept-row counts, the loss's collectives that are not metrics.
        top_entropy_quantile=0.8 if mode == "faults" else 1.0,
        use_adaptive_entropy=mode == "faults",
        entropy_coef=0.01 if mode == "faults" else 0.0,
        importance_sampling_level="sequence" if mode == "faults" else "token",
    )
    reward = EvenPromptsConstantReward() if mode in ("dynamic", "one_rank_faults") else AlignmentReward()
    trainer = RecordingTrainer(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=letter_dataset(24),
        processing_class=tokenizer,
        generation_backend=None,
    )
    rank = trainer.accelerator.process_index
    if mode == "straddle":
        backend = TaggedBackend(tokenizer, empty_positions=frozenset({0}) if rank == 1 else frozenset(), seed=rank)
    elif mode == "one_rank_faults":
        faulty = rank == 0
        backend = TaggedBackend(
            tokenizer,
            slot_failure_rate=0.4 * faulty,
            short_group_rate=0.4 * faulty,
            raise_rate=0.1 * faulty,
            seed=rank,
        )
    else:
        backend = TaggedBackend(
            tokenizer, slot_failure_rate=0.3, short_group_rate=0.3, oov_rate=0.05, raise_rate=0.05, seed=rank
        )
    trainer.generation_backend = backend
    trainer.records = []
    trainer.advantages = []
    trainer.train()
    checksum = sum(p.detach().double().sum().item() for p in trainer.model.parameters())
    logs = [
        {k: v for k, v in entry.items() if k.startswith(("generation/", "loss", "maxent/", "dynamic_sampling/"))}
        for entry in trainer.state.log_history
    ]
    out = {
        "rank": rank,
        "world_size": trainer.accelerator.num_processes,
        "records": trainer.records,
        "advantages": trainer.advantages,
        "rows_seen": reward.rows_seen,
        "checksum": checksum,
        "logs": logs,
        "finite_params": all(torch.isfinite(p).all().item() for p in trainer.model.parameters()),
    }
    return out, trainer.accelerator
