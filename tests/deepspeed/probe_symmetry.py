"""The symmetry section of `probe_zero` (two gloo processes under DeepSpeed ZeRO-3 on CPU): retry and refill rounds
with the built-in `TransformersBackend` when only process 0's generations fail.

Two runs, with TRL's ``ds3_gather_for_generation`` on (weights gathered once per `generate` call) and off (`generate`
gathers layer by layer, every decoding step a collective). On process 0 the real backend's output is damaged after
each call (slots lost, marked failed, groups cut short, or the whole call raising once it has generated), so process 0
asks for retries and refills that process 1 does not need. Each process makes its own `generate` calls; a call one
process makes and the other does not breaks ZeRO-3's collectives (gloo aborts with a size mismatch, NCCL would hang).
`run` has process r write OUTPUT_DIR/rank<r>.json: per run and generation batch, the backend calls with the rows
asked, the agreed keep mask, and a checksum of the gathered weights.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import deepspeed
import torch

from maxent_grpo import Completion, MaxEntGRPOTrainer
from maxent_grpo.training.generation.backends import GenerationBackend
from tests.support.training import letter_dataset, tiny_config, tiny_model_and_tokenizer


def odd_prompt_reward(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
    """Distinct characters for odd-numbered prompts, 0 for even ones: even groups have no signal and are refilled."""
    return [float(len(set(c))) if int(p[1:-1]) % 2 else 0.0 for p, c in zip(prompts, completions, strict=True)]


@dataclasses.dataclass
class DamagedAfterCall:
    """Delegates every call to ``backend`` (so this process takes part in its collectives), then damages the result:
    each slot is lost or marked failed with probability ``slot_failure_rate / 2`` each, a group is cut short with
    probability ``short_group_rate``, and the whole call raises with probability ``raise_rate``."""

    backend: GenerationBackend
    slot_failure_rate: float = 0.0
    short_group_rate: float = 0.0
    raise_rate: float = 0.0
    seed: int = 0
    calls: list[list[int]] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def generate(self, prompts: Sequence[Any], counts: Sequence[int]) -> list[list[Completion]]:
        self.calls.append(list(counts))
        groups = self.backend.generate(prompts, counts)
        if self._rng.random() < self.raise_rate:
            raise TimeoutError("injected timeout after the call")
        damaged = []
        for group in groups:
            kept = []
            for completion in group:
                draw = self._rng.random()
                if draw < self.slot_failure_rate / 2:
                    continue
                if draw < self.slot_failure_rate:
                    completion = dataclasses.replace(completion, failed=True)
                kept.append(completion)
            if len(kept) > 1 and self._rng.random() < self.short_group_rate:
                kept = kept[: self._rng.randrange(len(kept))]
            damaged.append(kept)
        return damaged


class RecordingTrainer(MaxEntGRPOTrainer):
    def _generate(self, prompts: list) -> tuple:
        calls_before = len(self.generation_backend.calls)
        result = super()._generate(prompts)
        self.records.append(
            {
                "global_keep": self._batch.global_keep.tolist(),
                "calls": self.generation_backend.calls[calls_before:],
            }
        )
        return result


def weight_checksum(model: torch.nn.Module) -> float:
    parameters = list(model.parameters())
    with deepspeed.zero.GatheredParameters(parameters, modifier_rank=None):
        return sum(p.detach().double().sum().item() for p in parameters)


def train_once(output_dir: Path, deepspeed_config: Path, gather_for_generation: bool) -> tuple[Any, dict[str, Any]]:
    model, tokenizer = tiny_model_and_tokenizer()
    args = tiny_config(
        output_dir,
        per_device_train_batch_size=6,  # groups of 4: the middle group of each generation batch straddles processes
        max_steps=3,
        gradient_accumulation_steps=2,
        steps_per_generation=1,  # two generation batches per optimizer step
        generation_max_retries=2,
        generation_max_consecutive_empty_batches=6,
        dynamic_sampling=True,
        dynamic_sampling_max_rounds=4,
        ds3_gather_for_generation=gather_for_generation,
        deepspeed=str(deepspeed_config),
        bf16=False,
    )
    trainer = RecordingTrainer(
        model=model,
        reward_funcs=odd_prompt_reward,
        args=args,
        train_dataset=letter_dataset(24),
        processing_class=tokenizer,
    )
    rank = trainer.accelerator.process_index
    faulty = rank == 0
    trainer.generation_backend = DamagedAfterCall(
        trainer.generation_backend,
        slot_failure_rate=0.4 * faulty,
        short_group_rate=0.4 * faulty,
        raise_rate=0.15 * faulty,
        seed=rank,
    )
    trainer.records = []
    trainer.train()
    out = {"records": trainer.records, "checksum": weight_checksum(trainer.model)}
    accelerator = trainer.accelerator
    del trainer
    return accelerator, out


def run(output_dir: Path, deepspeed_config: Path) -> Any:
    """Both runs; each process writes ``output_dir``/rank<r>.json. Returns the last run's accelerator."""
    runs: dict[str, dict[str, Any]] = {}
    for gather in (True, False):
        accelerator, runs[f"gather={gather}"] = train_once(output_dir / f"gather-{gather}", deepspeed_config, gather)
    rank = accelerator.process_index
    (output_dir / f"rank{rank}.json").write_text(json.dumps({"rank": rank, "runs": runs}))
    return accelerator
