"""The server section of `probe_zero` (two gloo processes under DeepSpeed ZeRO on CPU): server mode with the disk
weight transfer against the real vLLM server at BASE_URL, for the full model and for a LoRA adapter on it, and for the
full model with ``async_generation`` (no log-prob probe then: the calls made ahead run while the model trains, and a
ZeRO-3 forward is a collective that only the main thread may run).

`run` has each process write OUTPUT_DIR/rank<r>.json: per run, its weight pushes and, after each generation call that
brought completions back, the largest difference between the server's log-probs of a fixed text and the trained
model's (its forward gathers the ZeRO-3 shards: every process runs it) and the initial model's (`initial_logprobs`);
and the staleness logged at each step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig
from safetensors import safe_open
from transformers import AutoModelForCausalLM, AutoTokenizer

from maxent_grpo import MaxEntGRPOTrainer
from tests.support.real_vllm_server import wait_healthy
from tests.support.server_logprobs import PROBE_TEXT, ProbeAfterEachCall, model_logprobs
from tests.support.training import AlignedTextReward, letter_dataset, tiny_config

STALENESS = "generation/staleness_max"
SERVER_WAIT = 300.0  # seconds; the server was started in the background when the launch began
LORA = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], lora_dropout=0.0)


def train(output_dir: Path, deepspeed_config: str, model_dir: str, base_url: str, initial: torch.Tensor, **run: bool):
    config = tiny_config(
        output_dir,
        max_steps=3,
        per_device_train_batch_size=6,  # groups of 4 straddle the two processes
        learning_rate=5e-2,
        bf16=False,
        deepspeed=deepspeed_config,
        use_vllm=True,
        vllm_mode="server",
        vllm_server_base_url=base_url,
        vllm_weight_transfer="disk",
        async_generation=run["ahead"],
    )
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)  # partitioned at load by ZeRO-3
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    trainer = MaxEntGRPOTrainer(
        model=model,
        reward_funcs=AlignedTextReward(),
        args=config,
        train_dataset=letter_dataset(24),
        processing_class=tokenizer,
        peft_config=LORA if run["lora"] else None,
    )
    backend = trainer.generation_backend
    probe = None if run["ahead"] else ProbeAfterEachCall(backend, trainer.model, tokenizer, base_url, initial=initial)
    trainer.train()
    record = {
        "zero_stage": trainer.accelerator.state.deepspeed_plugin.zero_stage,
        "weight_pushes": backend.stats["weight_pushes"],
        "to_current": [] if probe is None else probe.to_current,
        "to_initial": [] if probe is None else probe.to_initial,
        "version": backend.weight_version,
        "weights_root": str(backend.disk_weights.directory.root),
        "weight_names": written_names(backend) if backend.disk_weights.pusher else [],
        "staleness": [e[STALENESS] for e in trainer.state.log_history if STALENESS in e],
    }
    return trainer.accelerator, record


def written_names(backend: Any) -> list[str]:
    """The tensor names of the version the backend wrote last (read while its run holds it: a memory-backed
    directory is emptied when the run ends)."""
    folder = backend.disk_weights.directory.path(backend.weight_version)
    return sorted(
        key
        for shard in folder.glob("*.safetensors")
        for key in safe_open(str(shard), "pt").keys()  # noqa: SIM118 (a safetensors handle is not a dict)
    )


def initial_logprobs(model_dir: str) -> torch.Tensor:
    """The log-probs of `PROBE_TEXT` under the weights the server was started with. Call it before any DeepSpeed config
    exists (the first `TrainingArguments` with one makes ZeRO-3 partition every model loaded after it), so the model
    loads whole."""
    plain = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return model_logprobs(plain, AutoTokenizer.from_pretrained(model_dir)(PROBE_TEXT)["input_ids"])


def wait_until_served(base_url: str) -> None:
    """Until ``GET /health`` answers 200 (RuntimeError after `SERVER_WAIT` seconds): the server starting while the
    sections before this one ran may not be ready yet."""
    if not wait_healthy(base_url, SERVER_WAIT):
        raise RuntimeError(f"the vLLM server at {base_url} was not ready within {SERVER_WAIT} s")


def run(output_dir: Path, deepspeed_config: str, model_dir: str, base_url: str, initial: torch.Tensor) -> Any:
    """The three runs; each process writes ``output_dir``/rank<r>.json. Returns the last run's accelerator."""
    wait_until_served(base_url)
    runs: dict[str, Any] = {}
    for name, lora, ahead in (("full", False, False), ("lora", True, False), ("async", False, True)):
        accelerator, runs[name] = train(
            output_dir / name, deepspeed_config, model_dir, base_url, initial, lora=lora, ahead=ahead
        )
    (output_dir / f"rank{accelerator.process_index}.json").write_text(json.dumps(runs))
    return accelerator
