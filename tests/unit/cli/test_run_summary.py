"""What `maxent-grpo train` shows while it trains and when it ends (`line_progress.WatchedProgress`, `run_summary`)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from transformers import TrainerControl, TrainerState

from maxent_grpo.cli.line_progress import WatchedProgress, format_seconds
from maxent_grpo.cli.run_summary import summary


def _log(progress, state, step, **logs):
    state.global_step = step
    progress.on_log(SimpleNamespace(output_dir="outputs/run"), state, TrainerControl(), logs=logs)


def test_progress_lines_show_the_watched_figures_and_the_summary_their_first_and_last_values(capsys):
    progress, state = WatchedProgress(lines=True), TrainerState(max_steps=10, is_world_process_zero=True)
    progress.on_train_begin(SimpleNamespace(output_dir="outputs/run"), state, TrainerControl())
    assert "outputs/run/metrics.jsonl" in capsys.readouterr().out  # where every figure goes, said at the start
    _log(progress, state, 5, reward=0.25, entropy=1.5, loss=0.1, **{"generation/dropped_prompts": 0.0})
    _log(progress, state, 10, reward=0.75, entropy=float("nan"), **{"generation/dropped_prompts": 2.0})
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("step 5/10 (50%): reward 0.25, token entropy 1.5 | ") and lines[0].endswith(" left")
    assert lines[1].startswith("step 10/10 (100%): reward 0.75, dropped prompts 2 | ")  # NaN left out, drops shown
    assert "loss" not in "".join(lines)
    progress.on_train_end(SimpleNamespace(output_dir="outputs/run"), state, TrainerControl())
    text = summary(progress, steps=10, output_dir="outputs/run", trackio_project="p", tiny_model=False).splitlines()
    assert text[1:3] == [
        "  reward: 0.25 at step 5 -> 0.75 at step 10",
        "  token entropy: 1.5 at step 5 -> 1.5 at step 5",
    ]
    assert text[3:5] == [
        "Model: outputs/run",
        "Every logged figure: outputs/run/metrics.jsonl (one JSON line per log)",
    ]
    assert text[5].startswith("trackio: TRACKIO_PLOT_ORDER=") and text[5].endswith("trackio show --project p")
    assert text[6] == "Next, generate with the trained model: maxent-grpo vllm-serve outputs/run"


def test_only_the_main_process_shows_progress(capsys):
    progress = WatchedProgress(lines=True)
    _log(progress, TrainerState(max_steps=10, is_world_process_zero=False), 5, reward=0.5)
    assert capsys.readouterr().err == "" and progress.first == {}


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.4, "0 s"), (42, "42 s"), (185, "3 min 05 s"), (7440, "2 h 04 min"), (math.pi, "3 s")]
)
def test_times_read_as_a_person_says_them(seconds, text):
    assert format_seconds(seconds) == text
