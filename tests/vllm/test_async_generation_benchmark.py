"""`benchmarks/async_generation.py` runs end to end against a real vLLM server (short runs), so it does not rot: the
session's server (`shared_server`), whose model the benchmark's trainers train (``--model-dir``) and push into;
starting and pinning a server of its own is the same `maxent-grpo vllm-serve` launch the vllm-serve tests run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the benchmark pins the server and trainer to 2 cores")
def test_async_generation_benchmark_prints_the_targets_and_writes_its_figures(server_url, vllm_model_dir, tmp_path):
    cores = sorted(os.sched_getaffinity(0))[:2]
    command = [sys.executable, str(ROOT / "benchmarks" / "async_generation.py"), "--rounds", "2", "--steps", "3",
               "--reward-steps", "1", "--batch-size", "8", "--num-generations", "4", "--max-completion-length", "8",
               "--server-core", str(cores[0]), "--trainer-core", str(cores[1]), "--server-url", server_url,
               "--model-dir", str(vllm_model_dir),
               "--quiet-wait", "0", "--output-dir", str(tmp_path)]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    for line in ("(1) async wall/step", "(2) sync / async wall per step", "(3) reward reached, async - sync"):
        assert line in result.stdout
    figures = json.loads((tmp_path / "async_generation.json").read_text())
    assert set(figures["all_rounds"]["targets"]) == {
        "async_wall_within_1.15x_max_of_sync_parts",
        "speedup_at_least_1.5",
        "reward_within_run_to_run_variance",
    }
    assert [len(runs) for runs in figures["runs"].values()] == [2, 2]
    assert all(row["staleness_max"] <= 1 for run in figures["runs"]["async"] for row in run)
    assert any(row["ahead_seconds"] > 0 for run in figures["runs"]["async"] for row in run)  # a batch made ahead
