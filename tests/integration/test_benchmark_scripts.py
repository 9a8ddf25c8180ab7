"""Benchmark scripts run end to end in a few seconds (the GPU check as a CPU dry run), so they do not rot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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
    for layout in ("server on GPU 0, trainer on GPU 1", "server on GPU 0, accelerate on the others"):
        assert f"{layout} (docs/guide/gpus.md): no GPU: skipped" in result.stdout


def test_gpu_check_without_a_gpu_says_no_gpu_skipped_for_each_gpu_part():
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    command = [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py")]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 3 and all("no GPU: skipped" in line for line in lines), lines


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
