"""GPU check: a few bf16 steps of MaxEntGRPOTrainer and stock GRPOTrainer side by side, with tokens/s and their ratio.

How to run (on a CUDA machine with torch, from a copy of this repository): `pip install trl-*.whl maxent_grpo-*.whl &&
python benchmarks/gpu_check.py` (add `--steps N`; `--allow-cpu` runs the same code on CPU as a dry run).

It builds a small Qwen2 model with the offline character tokenizer and saves it locally (such machines may have no
hub access), trains it with both trainers (TransformersBackend for ours), alternating, and prints tokens/s of each and
the ratio. When vLLM is importable it also runs colocate mode (with and without sleep mode) and server mode (starting
`vllm serve` itself); otherwise it says that those modes were skipped and why.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2, help="alternating (stock, ours) pairs")
    parser.add_argument("--hidden-size", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--allow-cpu", action="store_true", help="run on CPU when no GPU is present (dry run)")
    options = parser.parse_args()
    hf_logging.set_verbosity_error()

    if torch.cuda.is_available():
        device = "cuda"
        print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    elif options.allow_cpu:
        device = "cpu"
        print(f"device: CPU (dry run), torch {torch.__version__}")
    else:
        print("No CUDA device: nothing to check (use --allow-cpu for a dry run).", file=sys.stderr)
        return 1

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
            return 0
        if device != "cuda":
            print("vLLM colocate and server modes: skipped (vLLM needs a CUDA device)")
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
