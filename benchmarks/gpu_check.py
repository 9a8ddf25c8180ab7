"""GPU check: a few bf16 steps of MaxEntGRPOTrainer and stock GRPOTrainer side by side, with tokens/s and their ratio.

How to run (on a CUDA machine with torch, from a copy of this repository): `pip install trl-*.whl maxent_grpo-*.whl &&
python benchmarks/gpu_check.py` (add `--steps N`; `--allow-cpu` runs the same code on CPU as a dry run).

It builds a small Qwen2 model with the offline character tokenizer and saves it locally (such machines may have no
hub access), trains it with both trainers (TransformersBackend for ours), alternating, and prints tokens/s of each and
the ratio. When vLLM is importable it also runs colocate mode (with and without sleep mode) and server mode (starting
`vllm serve` itself); otherwise it says that those modes were skipped and why.

Then the layouts of docs/guide/gpus.md, with the page's own commands and recipe
(configs/recipes/qwen3_0.6b_server.yaml), the model and the data swapped for the tiny model and a local prompt file,
and a few short steps: with two GPUs, `maxent-grpo vllm-serve` on GPU 0 and `maxent-grpo train` on GPU 1; with three
or more, `accelerate launch` with configs/accelerate/ddp_beside_server.yaml on the GPUs after the server's (its
num_processes and gpu_ids given for the GPUs there are). Without a GPU every GPU part says "no GPU: skipped".
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from transformers.utils import logging as hf_logging
from trl import GRPOConfig, GRPOTrainer

from maxent_grpo import MaxEntGRPOConfig, MaxEntGRPOTrainer
from maxent_grpo.rewards import unique_chars_reward
from maxent_grpo.tiny_model import save_tiny_model

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "configs" / "recipes" / "qwen3_0.6b_server.yaml"
BESIDE_SERVER = ROOT / "configs" / "accelerate" / "ddp_beside_server.yaml"
COMPARISON = "GRPOTrainer and MaxEntGRPOTrainer side by side (bf16)"
TWO_GPUS = "server on GPU 0, trainer on GPU 1 (docs/guide/gpus.md)"
BESIDE = "server on GPU 0, accelerate on the others (docs/guide/gpus.md)"
#: What the layouts change in the recipe: the tiny model and local prompts, a few short steps, no tracker.
TINY_RUN = [
    "--max_steps", "3", "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "1",
    "--max_completion_length", "32", "--logging_steps", "1", "--save_strategy", "no", "--report_to", "none",
]  # fmt: skip


def _train(trainer_class: type, config_class: type, model_dir: Path, device: str, steps: int, **extra: Any) -> float:
    """Train ``steps`` steps and return tokens (prompt + completion) per second."""
    dataset = Dataset.from_dict({"prompt": [f"write a short story number {i}:" for i in range(512)]})
    with tempfile.TemporaryDirectory() as output_dir:
        args = config_class(
            output_dir=output_dir,
            per_device_train_batch_size=16,
            num_generations=8,
            max_completion_length=64,
            max_steps=steps,
            learning_rate=1e-5,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            bf16=device == "cuda",
            use_cpu=device == "cpu",
            disable_tqdm=True,
            **extra,
        )
        trainer = trainer_class(
            model=str(model_dir), reward_funcs=unique_chars_reward, args=args, train_dataset=dataset
        )
        start = time.perf_counter()
        trainer.train()
        elapsed = time.perf_counter() - start
    return trainer.state.num_input_tokens_seen / elapsed


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_vllm_server(model_dir: Path, port: int, log_path: Path) -> subprocess.Popen:
    vllm = shutil.which("vllm")
    if vllm is None:
        raise RuntimeError("the vllm command is not on PATH")
    command = [
        vllm, "serve", str(model_dir), "--host", "127.0.0.1", "--port", str(port), "--gpu-memory-utilization", "0.3",
        "--weight-transfer-config", json.dumps({"backend": "nccl"}),
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=log_path.open("w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"vllm serve exited with {process.returncode}; see {log_path}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                return process
        except OSError:
            time.sleep(2)
    process.terminate()
    raise RuntimeError(f"vllm serve was not healthy within 600 s; see {log_path}")


def layout_commands(
    model_dir: Path, data_file: Path, output_dir: Path, gpus: int
) -> tuple[list[str], dict[str, str], list[str], dict[str, str]]:
    """The server's and the trainer's command lines and environments (on top of this one's) of the GPU page's layout
    on ``gpus`` GPUs: with 2, the page's two commands; with more, the trainer through `accelerate launch` on GPUs
    1 to ``gpus - 1``. The recipe's model and data are swapped for ``model_dir`` and ``data_file``."""
    cli = [sys.executable, "-m", "maxent_grpo.cli"]
    server = [*cli, "vllm-serve", str(model_dir)]
    train = [
        "train",
        "--config",
        str(RECIPE),
        "--model_name_or_path",
        str(model_dir),
        "--dataset_name",
        str(data_file),
    ]
    train += ["--output_dir", str(output_dir), *TINY_RUN]
    if gpus == 2:
        return server, {"CUDA_VISIBLE_DEVICES": "0"}, [*cli, *train], {"CUDA_VISIBLE_DEVICES": "1"}
    others = ",".join(str(gpu) for gpu in range(1, gpus))
    accelerate = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(BESIDE_SERVER)]
    accelerate += ["--num_processes", str(gpus - 1), "--gpu_ids", others, "-m", "maxent_grpo.cli", *train]
    return server, {"CUDA_VISIBLE_DEVICES": "0"}, accelerate, {}


def _run_layout(label: str, model_dir: Path, workdir: Path, gpus: int) -> None:
    """Serve ``model_dir`` and train against it as the GPU page does, and say how it went in a few lines."""
    data_file = workdir / "prompts.jsonl"
    data_file.write_text(
        "".join(json.dumps({"prompt": f"add {i} and {i}:", "solution": str(2 * i)}) + "\n" for i in range(64))
    )
    server, server_env, train, train_env = layout_commands(model_dir, data_file, workdir / "run", gpus)
    log_path = workdir / f"vllm_serve_{gpus}.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(server, env={**os.environ, **server_env}, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 600
            while "vLLM server ready at" not in log_path.read_text():
                if process.poll() is not None or time.monotonic() > deadline:
                    print(f"{label}: the server did not become ready; see {log_path}")
                    return
                time.sleep(2)
            start = time.perf_counter()
            result = subprocess.run(train, env={**os.environ, **train_env}, capture_output=True, text=True)
            seconds = time.perf_counter() - start
        finally:
            process.send_signal(signal.SIGINT)  # vllm-serve ends its server and everything it started
            process.wait(timeout=120)
    if result.returncode != 0:
        last = result.stderr.strip().splitlines()[-1:] or ["(no output)"]
        print(f"{label}: training failed (exit code {result.returncode}): {last[0]}")
        return
    print(f"{label}: 3 steps in {seconds:.0f} s (start-up included); the run's summary:")
    print("\n".join(f"    {line}" for line in result.stdout.splitlines() if line.startswith(("Trained", "  "))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2, help="alternating (stock, ours) pairs")
    parser.add_argument("--hidden-size", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--allow-cpu", action="store_true", help="run on CPU when no GPU is present (dry run)")
    options = parser.parse_args()
    hf_logging.set_verbosity_error()

    gpus = torch.cuda.device_count()
    if gpus:
        device = "cuda"
        print(f"device: {gpus} x {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    elif options.allow_cpu:
        device = "cpu"
        print(f"device: CPU (dry run), torch {torch.__version__}")
    else:
        for label in (COMPARISON, TWO_GPUS, BESIDE):
            print(f"{label}: no GPU: skipped (--allow-cpu runs the comparison on CPU)")
        return 0

    with tempfile.TemporaryDirectory() as workdir:
        model_dir = save_tiny_model(
            Path(workdir) / "model", hidden_size=options.hidden_size, num_layers=options.layers
        )
        results: dict[str, list[float]] = {"GRPOTrainer (stock)": [], "MaxEntGRPOTrainer": []}
        for round_index in range(options.rounds):
            results["GRPOTrainer (stock)"].append(_train(GRPOTrainer, GRPOConfig, model_dir, device, options.steps))
            results["MaxEntGRPOTrainer"].append(
                _train(MaxEntGRPOTrainer, MaxEntGRPOConfig, model_dir, device, options.steps)
            )
            print(
                f"round {round_index + 1}: stock {results['GRPOTrainer (stock)'][-1]:.0f} tok/s, "
                f"maxent {results['MaxEntGRPOTrainer'][-1]:.0f} tok/s",
                flush=True,
            )
        stock = statistics.median(results["GRPOTrainer (stock)"])
        ours = statistics.median(results["MaxEntGRPOTrainer"])
        print(f"\n{'trainer':<24}{'median tokens/s':>16}")
        print(f"{'GRPOTrainer (stock)':<24}{stock:>16.0f}")
        print(f"{'MaxEntGRPOTrainer':<24}{ours:>16.0f}")
        print(f"tokens/s ratio maxent/stock: {ours / stock:.3f}")

        if importlib.util.find_spec("vllm") is None:
            print("vLLM colocate and server modes: skipped (vllm is not installed on this machine)")
            for label in (TWO_GPUS, BESIDE):
                print(f"{label}: {'no GPU' if not gpus else 'vllm is not installed'}: skipped")
            return 0
        if device != "cuda":
            print("vLLM colocate and server modes: skipped (vLLM needs a CUDA device)")
            for label in (TWO_GPUS, BESIDE):
                print(f"{label}: no GPU: skipped")
            return 0
        for label, sleep_mode in (("", False), (" with sleep mode", True)):
            colocate = _train(
                MaxEntGRPOTrainer,
                MaxEntGRPOConfig,
                model_dir,
                device,
                options.steps,
                use_vllm=True,
                vllm_mode="colocate",
                vllm_gpu_memory_utilization=0.3,
                vllm_enable_sleep_mode=sleep_mode,
            )
            print(f"MaxEntGRPOTrainer, vLLM colocate{label}: {colocate:.0f} tok/s")
        port = _free_port()
        server = _start_vllm_server(model_dir, port, Path(workdir) / "vllm_serve.log")
        try:
            served = _train(
                MaxEntGRPOTrainer,
                MaxEntGRPOConfig,
                model_dir,
                device,
                options.steps,
                use_vllm=True,
                vllm_mode="server",
                vllm_server_base_url=f"http://127.0.0.1:{port}",
            )
            print(f"MaxEntGRPOTrainer, vLLM server: {served:.0f} tok/s")
        finally:
            server.terminate()
            server.wait(timeout=60)
        for label, needed in ((TWO_GPUS, 2), (BESIDE, 3)):
            if gpus < needed:
                print(f"{label}: needs {needed} GPUs, found {gpus}: skipped")
            else:
                _run_layout(label, model_dir, Path(workdir), needed if needed == 2 else gpus)
    return 0


if __name__ == "__main__":
    sys.exit(main())
