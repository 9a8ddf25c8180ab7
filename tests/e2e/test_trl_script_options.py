"""`maxent-grpo train` with the options of TRL's `grpo` script: reference model, LoRA, eval split, streaming, dtype."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.cli_runner import DEMO_RECIPE, offline_env, run_cli

pytestmark = pytest.mark.slow

QUICK = ["--max_steps", "2", "--logging_steps", "1", "--disable_tqdm", "true"]


def _logs(output_dir: Path) -> list[dict]:
    """The Trainer's logs, as `maxent-grpo train` writes every one of them to ``<output_dir>/metrics.jsonl``."""
    return [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]


def _prompts(tmp_path: Path, count: int) -> str:
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": "pick a vowel:"}) for _ in range(count)))
    return str(path)


def _train(tmp_path: Path, *extra: str) -> list[dict]:
    result = run_cli(
        ["train", "--config", str(DEMO_RECIPE), "--output_dir", str(tmp_path / "run"), *QUICK, *extra],
        offline_env(tmp_path),
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return _logs(tmp_path / "run")


def test_tiny_model_with_beta_and_kl_target_trains_offline(tmp_path):
    logs = _train(tmp_path, "--beta", "0.1", "--kl_target", "0.01", "--kl_horizon", "10", "--max_steps", "3")
    steps = [log for log in logs if "kl" in log]
    assert len(steps) == 3
    assert float(steps[0]["kl"]) == 0.0 and float(steps[-1]["kl"]) > 0  # measured against the initial model
    assert float(steps[-1]["maxent/beta"]) != 0.1  # the adaptive-KL controller moves beta


def test_lora_with_an_eval_split(tmp_path):
    logs = _train(
        tmp_path,
        "--dataset_name", _prompts(tmp_path, 64),
        "--dataset_train_split", "train[:48]",
        "--dataset_test_split", "train[48:]",
        "--eval_strategy", "steps", "--eval_steps", "1", "--per_device_eval_batch_size", "16",
        "--use_peft", "true", "--lora_r", "4", "--lora_alpha", "8", "--lora_target_modules", "q_proj", "v_proj",
    )  # fmt: skip
    evaluations = [log for log in logs if "eval_reward" in log]
    assert len(evaluations) == 2
    adapter = json.loads((tmp_path / "run" / "adapter_config.json").read_text())  # the adapter is what is saved
    assert (adapter["r"], adapter["lora_alpha"], sorted(adapter["target_modules"])) == (4, 8, ["q_proj", "v_proj"])
    assert not (tmp_path / "run" / "model.safetensors").exists()


def test_local_model_with_loading_options_on_a_streamed_dataset(tmp_path, tiny_model_dir):
    logs = _train(
        tmp_path,
        "--model_name_or_path", str(tiny_model_dir),
        "--model_revision", "main", "--dtype", "bfloat16", "--attn_implementation", "eager",
        "--dataset_name", _prompts(tmp_path, 64), "--dataset_streaming", "true",
    )  # fmt: skip
    assert len([log for log in logs if "reward" in log]) == 2
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["dtype"] == "bfloat16"  # loaded (and trained) in the dtype asked for
