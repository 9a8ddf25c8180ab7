"""`maxent-grpo train` in colocate mode on two gloo processes under `accelerate launch`: each process builds its own
real vLLM engine through TRL and samples from the current weights; the command ends cleanly and saves."""

from __future__ import annotations

import json

import pytest

from tests.e2e.cli_runner import DEMO_RECIPE, MULTI_CPU_CONFIG, executable, offline_env, run
from tests.support.rows_per_process import rows_seen

pytestmark = pytest.mark.distributed


def test_train_command_on_two_processes_samples_each_from_its_own_engine_at_the_current_weights(
    tmp_path, vllm_model_dir
):
    output_dir, rows = tmp_path / "run", tmp_path / "rows"
    rows.mkdir()
    command = [
        executable("accelerate"), "launch", "--config_file", str(MULTI_CPU_CONFIG), "--main_process_port", "0",
        "-m", "maxent_grpo.cli",
        "train", "--config", str(DEMO_RECIPE), "--model_name_or_path", str(vllm_model_dir),
        "--output_dir", str(output_dir), "--max_steps", "3", "--logging_steps", "1", "--bf16", "false",
        "--per_device_train_batch_size", "6", "--num_generations", "4",  # groups of 4 straddle the two processes
        "--learning_rate", "5e-2", "--reward_funcs", "tests.support.rows_per_process.counted_length",
        "--use_vllm", "true", "--vllm_mode", "colocate", "--vllm_gpu_memory_utilization", "0.3",
        "--vllm_max_model_length", "128", "--save_strategy", "steps", "--save_steps", "3",
    ]  # fmt: skip
    result = run(command, offline_env(tmp_path, ROWS_SEEN_DIR=str(rows)), timeout=600)

    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-6000:]
    assert "Traceback" not in result.stderr, result.stderr[-6000:]
    assert (output_dir / "model.safetensors").is_file()
    history = json.loads((output_dir / "checkpoint-3" / "trainer_state.json").read_text())["log_history"]
    differences = [entry["sampling/sampling_logp_difference/mean"] for entry in history if "loss" in entry]
    print(f"two-process colocate sampling_logp_difference/mean per step (over both processes): {differences}")
    assert len(differences) == 3 and all(value < 1e-3 for value in differences), differences
    assert rows_seen(rows, 0) == rows_seen(rows, 1) == 3 * 6  # each process scored its own rows, every step
