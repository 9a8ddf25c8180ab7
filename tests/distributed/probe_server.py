"""Run under `accelerate launch --multi_gpu --num_processes 2` (CPU, gloo) with vLLM installed: one shared server.

Usage: probe_server.py OUTPUT_DIR MODEL_DIR BASE_URL VARIANT [VARIANT ...]: each variant, one after another in the
same two processes (they start once for all), trains 3 steps in float32 from a fresh trainer against the vLLM server
at BASE_URL (disk weight transfer): ``ddp``, the model whole on each process; ``fsdp2``, sharded when it is loaded
(transformers' ``DistributedConfig(fsdp_size=2)``, the way FSDP2 runs on CPU); ``async``, whole with
``async_generation`` (no log-prob probe then: calls made ahead run while the model trains); ``async-fault``, the same
with process 1's first call ahead raising (a fault on one process only). Each trainer pushes its own weights before
its first generation, whatever an earlier variant left on the server. Each process writes
OUTPUT_DIR/<variant>/rank<r>.json: its backend's weight version at each generation call, its weight pushes, the
largest difference between the server's log-probs of a fixed text and its own model's (the initial model's) after
each call that brought completions back, the sum of its model's parameters after training (of its own shards under
``fsdp2``) and some generation metrics logged at each step.
"""

from __future__ import annotations

import gc
import json
import sys
import threading
from pathlib import Path

import torch
from torch.distributed.tensor import DTensor
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.distributed import DistributedConfig

from maxent_grpo import MaxEntGRPOTrainer
from maxent_grpo.cli.commands.train import end_training
from tests.support.server_logprobs import PROBE_TEXT, ProbeAfterEachCall, model_logprobs
from tests.support.training import AlignedTextReward, letter_dataset, tiny_config

STALENESS = "generation/staleness_max"


VARIANTS = ("ddp", "fsdp2", "async", "async-fault")


def train(output_dir: Path, model_dir: str, base_url: str, variant: str):
    reward = AlignedTextReward()
    is_async = variant.startswith("async")
    config = tiny_config(
        output_dir,
        max_steps=3,
        per_device_train_batch_size=6,  # groups of 4 straddle the two processes
        learning_rate=5e-2,
        bf16=False,
        use_vllm=True,
        vllm_mode="server",
        vllm_server_base_url=base_url,
        vllm_weight_transfer="disk",
        async_generation=is_async,
    )
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    plain = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    initial = model_logprobs(plain, tokenizer(PROBE_TEXT)["input_ids"])
    distributed = DistributedConfig(fsdp_size=2) if variant == "fsdp2" else None
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, distributed_config=distributed)
    trainer = MaxEntGRPOTrainer(
        model=model, reward_funcs=reward, args=config, train_dataset=letter_dataset(24), processing_class=tokenizer
    )
    backend = trainer.generation_backend
    if not is_async:
        probe = ProbeAfterEachCall(backend, trainer.model, tokenizer, base_url, initial=initial)
    if variant == "async-fault" and trainer.accelerator.process_index == 1:
        fail_first_call_ahead(backend)
    versions: list[str | None] = []
    probed = backend.generate

    def recording(prompts, counts):
        versions.append(backend.weight_version)
        return probed(prompts, counts)

    backend.generate = recording
    trainer.train()
    record = {
        "versions": versions,
        "weight_pushes": backend.stats["weight_pushes"],
        "to_current": [] if is_async else probe.to_current,
        "to_initial": [] if is_async else probe.to_initial,
        "sharded_parameters": sum(isinstance(p, DTensor) for p in trainer.model.parameters()),
        "checksum": sum(
            (p.to_local() if isinstance(p, DTensor) else p).detach().double().sum().item()
            for p in trainer.model.parameters()
        ),
        "rows_seen": reward.rows_seen,
        **{
            name: [e[f"generation/{name}"] for e in trainer.state.log_history if f"generation/{name}" in e]
            for name in ("staleness_max", "staleness_mean", "backend_errors", "retried_prompts", "dropped_prompts")
        },
    }
    (output_dir / f"rank{trainer.accelerator.process_index}.json").write_text(json.dumps(record))
    return trainer.accelerator


def fail_first_call_ahead(backend) -> None:
    """The first call made ahead (on the background thread) raises, as a server lost for one call would."""
    generate = backend.generate
    failed = []

    def failing(prompts, counts):
        if threading.current_thread().name == "maxent-grpo-async-generation" and not failed:
            failed.append(True)
            raise ConnectionError("injected: process 1 lost the server for one call")
        return generate(prompts, counts)

    backend.generate = failing


def main() -> None:
    output_dir, model_dir, base_url, variants = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown or not variants:
        raise SystemExit(f"variants {variants}: expected one or more of {VARIANTS}")
    for variant in variants:
        folder = output_dir / variant
        folder.mkdir(parents=True, exist_ok=True)
        accelerator = train(folder, model_dir, base_url, variant)
        accelerator.free_memory()  # this variant's model and optimizer, while the process group is still there
        gc.collect()
    end_training(accelerator)  # the trainers are gone by now


if __name__ == "__main__":
    main()
