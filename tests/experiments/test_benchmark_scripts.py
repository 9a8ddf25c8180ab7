"""Benchmark scripts run end to end in a few seconds (the GPU check as a CPU dry run), so they do not rot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from accelerate.commands.launch import launch_command_parser

from maxent_grpo.cli.recipe import parse_train_args
from tests.support.benchmark_script import load_benchmark

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CLI = "maxent_grpo.cli"  # `maxent-grpo`, as `python -m maxent_grpo.cli`


def test_gpu_check_dry_run_prints_ratio_and_skips_vllm():
    command = [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--allow-cpu", "--steps", "1", "--rounds",
               "1", "--hidden-size", "32", "--layers", "1"]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "tokens/s ratio maxent/stock:" in result.stdout
    assert "vLLM colocate and server modes: skipped" in result.stdout
    # Without --model the dry run leaves the real model alone, whatever this machine's cache holds.
    real_model = "SmolLM2-135M-Instruct (the comparison and the 2-process run): skipped on the CPU dry run"
    assert real_model in result.stdout
    for layout in ("server on GPU 0, trainer on GPU 1", "server on GPU 0, accelerate on the others"):
        assert f"{layout} (docs/guide/gpus.md): no GPU: skipped" in result.stdout


def test_gpu_check_without_a_gpu_says_no_gpu_skipped_for_each_gpu_part():
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    command = [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py")]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 5 and all("no GPU: skipped" in line for line in lines), lines
    assert any(line.startswith("SmolLM2-135M-Instruct: MaxEntGRPOTrainer in 2 processes") for line in lines), lines


def test_gpu_check_finds_the_real_model_only_where_it_is_at_hand_and_says_what_to_bring(tmp_path, monkeypatch):
    gpu_check = load_benchmark("gpu_check")
    built = []

    def smollm2_dir():
        built.append(True)
        raise gpu_check.ModelBuildError("building SmolLM2 needs the gguf package")

    monkeypatch.setattr(gpu_check, "cache_root", lambda: tmp_path)  # an empty cache: no folder, no wheel
    monkeypatch.setattr(gpu_check, "smollm2_dir", smollm2_dir)
    monkeypatch.setattr(gpu_check, "importlib", SimpleNamespace(util=SimpleNamespace(find_spec=lambda name: None)))
    assert gpu_check._real_model_dir(None, "cuda") == gpu_check.BRING and not built  # never asks the index
    assert "--model DIR" in gpu_check.BRING and gpu_check.WHEEL_NAME in gpu_check.BRING
    missing = gpu_check._real_model_dir(tmp_path / "missing", "cuda")
    assert missing.startswith(f"--model {tmp_path / 'missing'} is not a folder") and "does not exist" in missing
    assert gpu_check._real_model_dir(None, "cpu").startswith("skipped on the CPU dry run")
    # With the wheel in the cache it builds the folder, and a build that fails is one line, not a failed check.
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / gpu_check.WHEEL_NAME).write_bytes(b"")
    assert gpu_check._real_model_dir(None, "cuda") == "building SmolLM2 needs the gguf package" and built


def test_gpu_check_two_process_run_is_two_bf16_processes_of_this_script_and_compares_their_records(tmp_path):
    gpu_check = load_benchmark("gpu_check")
    command = gpu_check.two_process_command(tmp_path / "model", 3, tmp_path / "records")
    assert command[1:3] == ["-m", "accelerate.commands.launch"]
    options = launch_command_parser().parse_args(command[3:])
    assert (options.multi_gpu, options.num_processes, options.mixed_precision) == (True, 2, "bf16")
    assert options.training_script == str(ROOT / "benchmarks" / "gpu_check.py")
    worker = ["--model", str(tmp_path / "model"), "--steps", "3", "--worker-records", str(tmp_path / "records")]
    assert options.training_script_args == worker
    record = {
        "backend": "nccl",
        "world_size": 2,
        "mixed_precision": "bf16",
        "steps": 3,
        "dropped_prompts": [0.0, 0.0, 0.0],
        "tokens_seen": 900,
        "parameters_sha256": "ab",
    }
    assert gpu_check._two_process_problems([record, dict(record)], 3) == []
    diverged = {**record, "parameters_sha256": "cd", "dropped_prompts": [0.0, 1.0, 0.0]}
    problems = gpu_check._two_process_problems([record, diverged], 3)
    assert problems == [
        "process 1 logged dropped prompts per step [0.0, 1.0, 0.0]",
        "the processes ended with different parameters",
    ]
    unlogged = {**record, "backend": "gloo", "dropped_prompts": []}  # a step that did not say counts as a problem
    assert len(gpu_check._two_process_problems([unlogged, record], 3)) == 2


def test_gpu_check_runs_the_gpu_pages_commands_and_recipe_with_only_the_model_data_and_length_swapped(tmp_path):
    gpu_check = load_benchmark("gpu_check")
    model, data = tmp_path / "tiny", tmp_path / "prompts.jsonl"
    server, server_env, train, train_env = gpu_check.layout_commands(model, data, tmp_path / "run", gpus=2)
    page = (ROOT / "docs" / "guide" / "gpus.md").read_text()
    # The page's two commands, `maxent-grpo` run as `python -m maxent_grpo.cli`.
    assert "CUDA_VISIBLE_DEVICES=0 maxent-grpo vllm-serve Qwen/Qwen3-0.6B\n" in page
    assert "CUDA_VISIBLE_DEVICES=1 maxent-grpo train --config configs/recipes/qwen3_0.6b_server.yaml\n" in page
    assert (server_env, server[1:]) == (
        {"CUDA_VISIBLE_DEVICES": "0"},
        ["-m", "maxent_grpo.cli", "vllm-serve", str(model)],
    )
    assert train_env == {"CUDA_VISIBLE_DEVICES": "1"}
    assert train[1:6] == [
        "-m",
        "maxent_grpo.cli",
        "train",
        "--config",
        str(ROOT / "configs/recipes/qwen3_0.6b_server.yaml"),
    ]
    # What it changes parses with the recipe, and leaves server mode, the server's address and the transfer alone.
    script_args, config, model_args = parse_train_args([*train[4:], "--use_cpu", "true"])
    assert (model_args.model_name_or_path, script_args.dataset_name) == (str(model), str(data))
    assert (config.vllm_mode, config.vllm_server_base_url, config.vllm_weight_transfer) == (
        "server",
        "http://127.0.0.1:8000",
        "auto",
    )
    # With four GPUs: accelerate, with the beside-server config, on GPUs 1 to 3.
    _, _, launch, launch_env = gpu_check.layout_commands(model, data, tmp_path / "run", gpus=4)
    assert launch[1:3] == ["-m", "accelerate.commands.launch"] and launch_env == {}
    options = launch_command_parser().parse_args(launch[3:])
    assert (options.num_processes, options.gpu_ids, options.module, options.training_script) == (
        3,
        "1,2,3",
        True,
        "maxent_grpo.cli",
    )
    assert options.config_file == str(ROOT / "configs/accelerate/ddp_beside_server.yaml")


def test_generate_overhead_runs_and_prints_the_ratio():
    command = [sys.executable, str(ROOT / "benchmarks" / "generate_overhead.py"), "--rounds", "1", "--steps", "1"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "step-time ratio maxent/stock:" in result.stdout
    assert "helpers + validation" in result.stdout


def test_server_pool_scaling_runs_and_writes_its_rows(tmp_path):
    script = ROOT / "benchmarks" / "server_pool_scaling.py"
    small = ["--servers", "1", "2", "--slow-pool", "2", "--warmup", "1", "--calls", "1", "--token-seconds", "0.001"]
    command = [sys.executable, str(script), "--output-dir", str(tmp_path), *small]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    rows = json.loads((tmp_path / "server_pool_scaling.json").read_text())["rows"]
    assert [(row["servers"], row["slow_servers"]) for row in rows] == [(1, 0), (2, 0), (2, 1)]
    assert all(row["ratio"] > 0 for row in rows) and (tmp_path / "server_pool_scaling.png").is_file()
