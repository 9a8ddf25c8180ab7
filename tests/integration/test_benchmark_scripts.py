"""Benchmark scripts run end to end in a few seconds (the GPU check as a CPU dry run), so they do not rot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_dry_run_prints_ratio_and_skips_vllm():
    command = [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--allow-cpu", "--steps", "1", "--rounds",
               "1", "--hidden-size", "32", "--layers", "1"]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "tokens/s ratio maxent/stock:" in result.stdout
    assert "vLLM colocate and server modes: skipped" in result.stdout


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
