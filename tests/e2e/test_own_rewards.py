"""`maxent-grpo train` with your own reward functions (dotted paths) and a reward model, writing to a log file."""

from __future__ import annotations

import json
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
VERBOSE = ["--log_level", "info"]  # every logged figure in the progress lines, as before the watched progress
TWO_STEPS = ["train", "--config", str(DEMO_RECIPE), "--max_steps", "2", "--logging_steps", "1"]


def _logged(output_dir) -> list[dict]:
    """Every log of the run, as `maxent-grpo train` writes them to ``<output_dir>/metrics.jsonl``."""
    return [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]


def test_dotted_reward_functions_train_with_line_progress_and_no_colour_codes(tmp_path):
    (tmp_path / "my_rewards.py").write_text(MY_REWARDS)  # importable from the working directory, as in TRL
    result = run_cli(
        [*TWO_STEPS, "--reward_funcs", "my_rewards.contains_digit", "my_rewards:is_short", "--report_to", "trackio"],
        offline_env(tmp_path),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # Progress: the watched figures only, with the time left; every figure in the metrics file.
    for step in (1, 2):
        line = next(line for line in result.stderr.splitlines() if line.startswith(f"step {step}/2 "))
        assert re.fullmatch(rf"step {step}/2 \(\d+%\): reward [\d.e-]+, mode coverage .* \| .* s/step, .* left", line)
        assert "rewards/" not in line and "loss" not in line, line
    logs = _logged(tmp_path / "outputs" / "demo")
    assert [log["step"] for log in logs if "reward" in log] == [1, 2]
    assert all("rewards/contains_digit/mean" in log and "rewards/is_short/mean" in log for log in logs[:2]), logs
    # Redirected output: one line per logging step, no progress-bar redraws, and trackio's banner without colours.
    assert "\r" not in result.stderr
    assert 'trackio show --project "maxent-grpo-demo"' in result.stdout  # named from the recipe, as the demo's
    assert "\x1b[" not in result.stdout + result.stderr
    assert (tmp_path / "outputs" / "demo" / "model.safetensors").is_file()
    # The summary: figures at the start and the end, where everything is, what to run next.
    summary = result.stdout[result.stdout.index("Trained 2 steps in ") :].splitlines()
    assert re.fullmatch(r"  reward: [\d.e-]+ at step 1 -> [\d.e-]+ at step 2", summary[1]), summary
    assert any(re.fullmatch(r"  model: outputs/demo \([\d.]+ [kMG]B\)", line) for line in summary), summary
    assert summary[-5].startswith("  every logged figure: outputs/demo/metrics.jsonl (")
    assert summary[-3].startswith("  TRACKIO_PLOT_ORDER='reward,entropy,")
    assert summary[-2] == "    trackio show --project maxent-grpo-demo"
    assert summary[-1].startswith("Next, a real model on two GPUs") and "docs/guide/gpus.md" in summary[-1]


def test_a_reward_function_from_a_file_trains(tmp_path):
    rewards = tmp_path / "rewards" / "mine.py"  # a file in a folder that is no package, off the working directory
    rewards.parent.mkdir()
    rewards.write_text(MY_REWARDS)
    result = run_cli([*TWO_STEPS, "--reward_funcs", f"{rewards}:contains_digit"], offline_env(tmp_path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "rewards/contains_digit/mean" in _logged(tmp_path / "outputs" / "demo")[0]


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
        [*TWO_STEPS, "--reward_funcs", "vowel_start", "--reward_model_name_or_path", str(reward_model), *VERBOSE],
        offline_env(tmp_path),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    logged = [line for line in result.stderr.splitlines() if line.startswith("step ")]
    assert all("rewards/my-reward-model/mean=" in line for line in logged[:2]), logged
    assert all("rewards/vowel_start_reward/mean=" in line for line in logged[:2]), logged
