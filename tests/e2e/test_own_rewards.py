"""`maxent-grpo train` with your own reward functions (dotted paths) and a reward model, writing to a log file."""

from __future__ import annotations

import re

import pytest
from transformers import Qwen2ForSequenceClassification

from maxent_grpo.tiny_model import build_tiny_model, build_tiny_tokenizer
from tests.e2e.cli_runner import DEMO_RECIPE, offline_env, run_cli

pytestmark = pytest.mark.slow

MY_REWARDS = """
def contains_digit(completions, **kwargs):
    return [float(any(c.isdigit() for c in text)) for text in completions]


def is_short(completions, **kwargs):
    return [float(len(text) <= 2) for text in completions]
"""
TWO_STEPS = ["train", "--config", str(DEMO_RECIPE), "--max_steps", "2", "--logging_steps", "1"]


def test_dotted_reward_functions_train_with_line_progress_and_no_colour_codes(tmp_path):
    (tmp_path / "my_rewards.py").write_text(MY_REWARDS)  # importable from the working directory, as in TRL
    result = run_cli(
        [*TWO_STEPS, "--reward_funcs", "my_rewards.contains_digit", "my_rewards:is_short", "--report_to", "trackio"],
        offline_env(tmp_path),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for step in (1, 2):
        line = next(line for line in result.stderr.splitlines() if line.startswith(f"step {step}/2 "))
        assert re.search(r"rewards/contains_digit/mean=[\d.]+", line), line
        assert re.search(r"rewards/is_short/mean=[\d.]+", line), line
    # Redirected output: one line per logging step, no progress-bar redraws, and trackio's banner without colours.
    assert "\r" not in result.stderr
    assert 'trackio show --project "huggingface"' in result.stdout
    assert "\x1b[" not in result.stdout + result.stderr
    assert (tmp_path / "outputs" / "demo" / "model.safetensors").is_file()


def _tiny_reward_model(path):
    """A sequence-classification model with one label over the tiny tokenizer, saved like a Hub reward model."""
    tokenizer = build_tiny_tokenizer()
    config = build_tiny_model(tokenizer).config
    config.num_labels = 1
    Qwen2ForSequenceClassification(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_reward_model_scores_the_completions(tmp_path):
    reward_model = _tiny_reward_model(tmp_path / "my-reward-model")
    result = run_cli(
        [*TWO_STEPS, "--reward_funcs", "vowel_start", "--reward_model_name_or_path", str(reward_model)],
        offline_env(tmp_path),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    logged = [line for line in result.stderr.splitlines() if line.startswith("step ")]
    assert all("rewards/my-reward-model/mean=" in line for line in logged[:2]), logged
    assert all("rewards/vowel_start_reward/mean=" in line for line in logged[:2]), logged
