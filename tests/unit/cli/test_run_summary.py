"""What `maxent-grpo train` shows while it trains and when it ends (`line_progress.WatchedProgress`, `run_summary`)."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
from transformers import TrainerControl, TrainerState

from maxent_grpo.cli.line_progress import WATCHED, WatchedProgress, format_seconds, opening_lines
from maxent_grpo.cli.run_summary import summary
from maxent_grpo.cli.trackio_show import PLOT_ORDER


def _log(progress, state, step, **logs):
    state.global_step = step
    progress.on_log(SimpleNamespace(output_dir="outputs/run"), state, TrainerControl(), logs=logs)


def _run_folder(tmp_path: Path) -> str:
    """An output folder as a run leaves it: the final model, a checkpoint with its optimizer state, the metrics."""
    folder = tmp_path / "outputs" / "run"
    (folder / "checkpoint-5").mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"\0" * 540_000)
    (folder / "config.json").write_bytes(b"\0" * 1_000)
    (folder / "checkpoint-5" / "model.safetensors").write_bytes(b"\0" * 540_000)
    (folder / "checkpoint-5" / "optimizer.pt").write_bytes(b"\0" * 1_080_000)
    (folder / "metrics.jsonl").write_bytes(b"\0" * 2_000)
    return str(folder)


def test_progress_lines_show_the_watched_figures_and_the_summary_their_first_and_last_values(capsys, tmp_path):
    output_dir = _run_folder(tmp_path)
    args = SimpleNamespace(output_dir=output_dir)
    progress, state = WatchedProgress(lines=True), TrainerState(max_steps=10, is_world_process_zero=True)
    progress.on_train_begin(args, state, TrainerControl())
    assert f"{output_dir}/metrics.jsonl" in capsys.readouterr().out  # where every figure goes, said at the start
    _log(progress, state, 5, reward=0.25, entropy=1.5, loss=0.1, **{"generation/dropped_prompts": 0.0})
    _log(progress, state, 10, reward=0.078125, entropy=float("nan"), **{"generation/dropped_prompts": 2.0})
    lines = capsys.readouterr().err.splitlines()
    # One format, 3 significant digits: "0.250" and "0.0781", not "0.25" beside "0.07812".
    assert lines[0].startswith("step 5/10 (50%): reward 0.250, token entropy 1.50 | ") and lines[0].endswith(" left")
    assert lines[1].startswith("step 10/10 (100%): reward 0.0781, dropped prompts 2 | ")  # NaN left out
    assert "loss" not in "".join(lines)
    progress.on_train_end(args, state, TrainerControl())
    text = summary(
        progress, steps=10, output_dir=output_dir, trackio_project="p", tiny_model=False, vllm_installed=True
    ).splitlines()
    assert text[:3] == [
        f"Trained 10 steps in {format_seconds(progress.seconds)}.",
        "  reward: 0.250 at step 5 -> 0.0781 at step 10",
        "  token entropy: 1.50 at step 5 -> 1.50 at step 5",
    ]
    assert text[-4:] == [
        "trackio dashboard, opening on the reward and the entropy:",
        f"  TRACKIO_PLOT_ORDER='{PLOT_ORDER}' \\",
        "    trackio show --project p",
        f"Next, generate with the trained model: maxent-grpo vllm-serve {output_dir}",
    ]


def test_the_summary_says_what_the_run_wrote_and_how_large(tmp_path):
    output_dir = _run_folder(tmp_path)
    text = summary(
        WatchedProgress(lines=True),
        steps=1,
        output_dir=output_dir,
        trackio_project=None,
        tiny_model=False,
        vllm_installed=True,
    ).splitlines()
    assert text[:5] == [
        "Trained 1 step in 0 s.",
        f"Written to {output_dir} (2.16 MB in all):",
        f"  model: {output_dir} (541 kB)",
        f"  checkpoint, with the optimizer state to resume from: {output_dir}/checkpoint-5 (1.62 MB)",
        f"  every logged figure: {output_dir}/metrics.jsonl (2.00 kB, one JSON line per log)",
    ]


def test_without_vllm_the_next_step_loads_the_model_with_transformers(tmp_path):
    output_dir = _run_folder(tmp_path)
    text = summary(
        WatchedProgress(lines=True),
        steps=2,
        output_dir=output_dir,
        trackio_project=None,
        tiny_model=False,
        vllm_installed=False,
    )
    assert "vllm-serve " + output_dir not in text
    assert f"  model = AutoModelForCausalLM.from_pretrained({output_dir!r})" in text.splitlines()
    assert f"  tokenizer = AutoTokenizer.from_pretrained({output_dir!r})" in text.splitlines()


@pytest.mark.parametrize("vllm_installed", [True, False])
def test_no_line_of_the_opening_or_the_summary_is_over_120_characters_but_for_its_paths(tmp_path, vllm_installed):
    output_dir = _run_folder(tmp_path / ("a-long-folder-name-" * 8))
    progress = WatchedProgress(lines=True)
    for key, _ in WATCHED:
        progress.first[key] = progress.last[key] = (1, 0.123456)
    project = "a-project-with-a-long-name-" * 3
    text = "\n".join(opening_lines(output_dir)) + "\n"
    text += summary(
        progress,
        steps=3,
        output_dir=output_dir,
        trackio_project=project,
        tiny_model=False,
        vllm_installed=vllm_installed,
    )
    for line in text.splitlines():
        assert len(line.replace(output_dir, "").replace(project, "")) <= 120, line


def test_progress_warns_once_when_most_completions_are_clipped_or_no_group_carries_signal(capsys):
    args = SimpleNamespace(output_dir="outputs/run", max_completion_length=1, num_generations=4)
    progress, state = WatchedProgress(lines=True), TrainerState(max_steps=10, is_world_process_zero=True)
    quiet = {"completions/clipped_ratio": 0.5, "frac_reward_zero_std": 0.75}
    for step, logs in enumerate(
        [quiet, {"completions/clipped_ratio": 0.75, "frac_reward_zero_std": 1.0}, {"completions/clipped_ratio": 0.875}]
    ):
        state.global_step = step
        progress.on_log(args, state, TrainerControl(), logs={"reward": 0.0, **logs})
    warnings = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("step ")]
    assert warnings == [
        "warning: 75% of the completions stopped at max_completion_length (1) before they ended:",
        "  raise --max_completion_length",
        "warning: every group of num_generations (4) completions got equal rewards (frac_reward_zero_std 1),",
        "  so there is no learning signal: raise --num_generations or --temperature, or use a reward that tells them "
        "apart",
    ]  # once each, each line under 120 characters
    assert all(len(line) <= 120 for line in warnings)


def test_only_the_main_process_shows_progress(capsys):
    progress = WatchedProgress(lines=True)
    _log(progress, TrainerState(max_steps=10, is_world_process_zero=False), 5, reward=0.5)
    assert capsys.readouterr().err == "" and progress.first == {}


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.4, "0 s"), (42, "42 s"), (185, "3 min 05 s"), (7440, "2 h 04 min"), (math.pi, "3 s")]
)
def test_times_read_as_a_person_says_them(seconds, text):
    assert format_seconds(seconds) == text
