"""`maxent-grpo train` with `--use_vllm true --vllm_mode colocate`: the command line on the real engine."""

from __future__ import annotations

import json

from tests.e2e.cli_runner import DEMO_RECIPE, offline_env, run_cli


def test_train_command_trains_through_a_colocated_engine_and_ends_cleanly(tmp_path, vllm_model_dir):
    output_dir = tmp_path / "run"
    args = [
        "train", "--config", str(DEMO_RECIPE), "--model_name_or_path", str(vllm_model_dir),
        "--output_dir", str(output_dir), "--max_steps", "3", "--logging_steps", "1", "--bf16", "false",
        "--use_vllm", "true", "--vllm_mode", "colocate", "--vllm_gpu_memory_utilization", "0.3",
        "--vllm_max_model_length", "128", "--save_strategy", "steps", "--save_steps", "3",
    ]  # fmt: skip
    result = run_cli(args, offline_env(tmp_path), timeout=600)

    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "Traceback" not in result.stderr, result.stderr[-4000:]
    assert (output_dir / "model.safetensors").is_file()
    history = json.loads((output_dir / "checkpoint-3" / "trainer_state.json").read_text())["log_history"]
    differences = [entry["sampling/sampling_logp_difference/mean"] for entry in history if "loss" in entry]
    assert len(differences) == 3 and all(value < 1e-3 for value in differences), differences
