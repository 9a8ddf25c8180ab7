"""Run under `accelerate launch --multi_gpu --num_processes 2` (CPU, gloo): a pool of stand-in servers, some of which
hang mid-run (``/health`` and ``/weight_info`` still answer; completions and reloads never do).

Usage: probe_pool_hang.py OUTPUT_DIR SERVERS_JSON VARIANT [VARIANT ...]. SERVERS_JSON lists the servers
(``[{"url": ..., "model": ..., "model_dir": ..., "pids": [...], "hang": SIGNAL, "answer": SIGNAL}, ...]``): a server
hangs when its ``pids`` are sent its ``hang`` signal and answers again on its ``answer`` signal (a stand-in server:
its own process, ``SIGUSR1`` both ways; a real `vllm` server: its engine core processes, ``SIGSTOP`` then
``SIGCONT``, which leave its API process and ``/health`` answering). Servers marked ``"stand_in": true`` have no
``/server_info``. Each variant, one after another in
the same two processes, trains `STEPS` steps from a fresh trainer (one prompt group per process and step, fewer groups
than servers): ``two``, a pool of the first two servers, the second of which hangs; ``async``, the same with
``async_generation``; ``three``, a pool of all three, the last two of which hang. The servers hang from the end of
step `HANG_AFTER` to the end of step `ANSWER_AFTER` (switched by process 0, both processes waiting for it). Each
process writes OUTPUT_DIR/<variant>/rank<r>.json: the seconds of each step, which servers its pool had up before each
of its calls (and after the last), each server's completions and hangs counted by the end of each step, and the
logged dropped prompts.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import requests
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl.generation.vllm_client import VLLMClient

from maxent_grpo import MaxEntGRPOTrainer
from maxent_grpo.cli.commands.train import end_training
from tests.support.training import AlignedTextReward, letter_dataset, tiny_config

VARIANTS = {"two": (2, [1], False), "async": (2, [1], True), "three": (3, [1, 2], False)}
STEPS, HANG_AFTER, ANSWER_AFTER = 13, 5, 9


def hang(servers: list[dict], on: bool) -> None:
    """Switch each server's hanging, and wait until a completion request shows it (on: one that is not answered in a
    second; off: one that is answered)."""
    for server in servers:
        for pid in server["pids"]:
            os.kill(pid, signal.Signals[server["hang" if on else "answer"]])
    for server in servers:
        payload = {"model": server["model"], "prompt": [0], "max_tokens": 1}
        for _ in range(30):
            try:
                requests.post(f"{server['url']}/v1/completions", json=payload, timeout=1.0 if on else 30.0)
            except requests.Timeout:
                if on:
                    break
                raise
            else:
                if not on:
                    break
        else:
            raise RuntimeError(f"server {server['url']} never showed hanging={on}")


class Record(TrainerCallback):
    """Times each step (from the end of the one before) and keeps what the pool knows at its end; switches the
    hanging servers (process 0) after `HANG_AFTER` and `ANSWER_AFTER`."""

    def __init__(self, hanging: list[dict]) -> None:
        self.hanging = hanging
        self.trainer: MaxEntGRPOTrainer | None = None
        self.seconds: list[float] = []
        self.completions: list[list[int]] = []
        self.hangs: list[list[int]] = []
        self._began = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        self.seconds.append(time.monotonic() - self._began)
        pool = self.trainer.generation_backend
        stats = pool.stats
        self.completions.append([stats[f"servers/{k}/completions"] for k in range(len(pool.members))])
        self.hangs.append([stats[f"servers/{k}/hangs"] for k in range(len(pool.members))])
        if state.global_step in (HANG_AFTER, ANSWER_AFTER):
            if self.trainer.accelerator.process_index == 0:
                hang(self.hanging, on=state.global_step == HANG_AFTER)
            self.trainer.accelerator.wait_for_everyone()
        self._began = time.monotonic()


def stand_in_server_info(client: VLLMClient) -> dict:
    """What TRL asks a server for before the importance-sampling correction: the stand-in has no ``/server_info``,
    and its logprobs are the processed ones (`stand_in_vllm.server`)."""
    return {"model_config": {"logprobs_mode": "processed_logprobs"}}


def train(output_dir: Path, servers: list[dict], variant: str) -> object:
    size, hanging, is_async = VARIANTS[variant]
    tokenizer = AutoTokenizer.from_pretrained(servers[0]["model_dir"])
    record = Record([servers[k] for k in hanging])
    config = tiny_config(
        output_dir,
        max_steps=STEPS,
        bf16=False,
        use_vllm=True,
        vllm_mode="server",
        vllm_server_base_urls=[server["url"] for server in servers[:size]],
        vllm_weight_transfer="disk",
        vllm_weights_dir=str(output_dir / "weights"),
        vllm_request_timeout=8.0,
        async_generation=is_async,
        vllm_importance_sampling_correction=is_async,
    )
    model = AutoModelForCausalLM.from_pretrained(servers[0]["model_dir"], dtype=torch.float32)
    if servers[0].get("stand_in"):
        VLLMClient.get_server_info = stand_in_server_info
    trainer = MaxEntGRPOTrainer(
        model=model,
        reward_funcs=AlignedTextReward(),
        args=config,
        train_dataset=letter_dataset(4 * STEPS),
        processing_class=tokenizer,
        callbacks=[record],
    )
    record.trainer = trainer
    pool, up = trainer.generation_backend, []
    generate = pool.generate

    def recording(prompts, counts):  # on the thread that makes the call: no call runs meanwhile
        up.append([member.up for member in pool.members])
        return generate(prompts, counts)

    pool.generate = recording
    trainer.train()
    up.append([member.up for member in pool.members])
    key = "generation/dropped_prompts"
    logged = [entry[key] for entry in trainer.state.log_history if key in entry]
    result = {
        "seconds": record.seconds,
        "up": up,
        "completions": record.completions,
        "hangs": record.hangs,
        "dropped": logged,
    }
    (output_dir / f"rank{trainer.accelerator.process_index}.json").write_text(json.dumps(result))
    return trainer.accelerator


def main() -> None:
    output_dir, servers, variants = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text()), sys.argv[3:]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown or not variants:
        raise SystemExit(f"variants {variants}: expected one or more of {sorted(VARIANTS)}")
    for variant in variants:
        folder = output_dir / variant
        folder.mkdir(parents=True, exist_ok=True)
        accelerator = train(folder, servers, variant)
        accelerator.free_memory()
    end_training(accelerator)


if __name__ == "__main__":
    main()
