"""`benchmarks/server_weight_sync.py` runs end to end against a real vLLM server (short runs), so it does not rot: the
session's server (`shared_server`), whose model the benchmark's three arms train (``--model-dir``) and push into;
starting and pinning a server of its own per size is the same `maxent-grpo vllm-serve` launch the vllm-serve tests
run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_server_weight_sync_benchmark_prints_each_arm_and_writes_its_profile(server_url, vllm_model_dir, tmp_path):
    command = [sys.executable, str(ROOT / "benchmarks" / "server_weight_sync.py"), "--steps", "3",
               "--server-url", server_url, "--model-dir", str(vllm_model_dir),
               "--output-dir", str(tmp_path)]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    figures = json.loads((tmp_path / "server_weight_sync.json").read_text())
    rows = {row["arm"]: row for row in figures["rows"]}
    assert list(rows) == ["full", "lora", "lora+delta"]
    for arm, row in rows.items():
        assert f" {arm} " in result.stdout
        assert (row["hidden_size"], row["num_layers"]) == (256, 2)
        # every push reloaded the server and was claimed, inside a step that holds it
        assert row["push_server_reload"] > 0 and row["push_claim"] > 0
        assert row["write"] + row["push_total"] < row["step"]
        assert 0 < row["share"] < 1
    # the delta arm wrote only what changed: the merged q and v layers, a fraction of the whole model
    assert rows["lora+delta"]["mb_per_version"] < rows["full"]["mb_per_version"] / 2
