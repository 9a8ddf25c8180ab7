"""Bad input ends `maxent-grpo` with exit code 2 and one clear line on stderr, never a traceback."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import datasets
import pytest

from maxent_grpo.cli import main
from tests.e2e.cli_runner import DEMO_RECIPE, offline_env, run_cli


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def _recipe_with(tmp_path: Path, extra: str) -> str:
    return _write(tmp_path / "recipe.yaml", DEMO_RECIPE.read_text() + extra)


def _prompts_without_prompt_column(tmp_path: Path) -> str:
    path = tmp_path / "questions.jsonl"
    path.write_text("\n".join(json.dumps({"question": f"q{i}"}) for i in range(4)))
    return str(path)


def _prompts(tmp_path: Path) -> str:
    return _write(tmp_path / "prompts.jsonl", "\n".join(json.dumps({"prompt": f"q{i}:"}) for i in range(4)))


def _partial_checkpoint(tmp_path: Path) -> str:
    """An output_dir whose only checkpoint was cut short: weights written, no trainer_state.json."""
    checkpoint = tmp_path / "run" / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    (checkpoint / "model.safetensors").write_bytes(b"")
    return str(tmp_path / "run")


TRAIN = ["train", "--config", str(DEMO_RECIPE)]
_EVAL = ["--eval_strategy", "steps", "--eval_steps", "1", "--per_device_eval_batch_size", "16"]

# (case id, argv builder taking tmp_path, text the error line must contain)
CASES = [
    ("unknown-field", lambda t: [*TRAIN, "--not_a_field", "1"], "'--not_a_field'"),
    ("unknown-field-in-recipe", lambda t: ["train", "--config", _recipe_with(t, "not_a_field: 1\n")], "'not_a_field'"),
    ("wrong-type", lambda t: [*TRAIN, "--learning_rate", "fast"], "invalid float value: 'fast'"),
    (
        "wrong-type-in-recipe",
        lambda t: ["train", "--config", _recipe_with(t, "max_steps: many\n")],
        "max_steps='many'",
    ),
    (
        "invalid-choice-in-recipe",
        lambda t: ["train", "--config", _recipe_with(t, "maxent_objective: best\n")],
        "maxent_objective='best'",
    ),
    ("missing-recipe", lambda t: ["train", "--config", str(t / "missing.yaml")], "missing.yaml"),
    ("recipe-not-yaml", lambda t: ["train", "--config", _recipe_with(t, "- a list item\n")], "not valid YAML"),
    ("recipe-not-a-mapping", lambda t: ["train", "--config", _write(t / "list.yaml", "- a\n- b\n")], "mapping"),
    ("missing-required", lambda t: ["train", "--dataset_name", "vowels"], "--reward_funcs"),
    (
        "missing-model",
        lambda t: ["train", "--dataset_name", "vowels", "--reward_funcs", "vowel_start", "--use_cpu", "true"],
        "required: --model_name_or_path",
    ),
    (
        "missing-model-and-dataset",
        lambda t: ["train", "--reward_funcs", "vowel_start", "--use_cpu", "true"],
        "required: --model_name_or_path, --dataset_name",
    ),
    (
        "dataset-without-prompt-column",
        lambda t: [*TRAIN, "--dataset_name", _prompts_without_prompt_column(t)],
        "no 'prompt' column",
    ),
    ("unknown-dataset", lambda t: [*TRAIN, "--dataset_name", "no-such-org/no-such-dataset"], "no-such-dataset"),
    ("unknown-model", lambda t: [*TRAIN, "--model_name_or_path", str(t / "no-model")], "no-model"),
    ("unknown-hub-model", lambda t: [*TRAIN, "--model_name_or_path", "no-such-org/no-such-model"], "no-such-model"),
    ("unknown-reward", lambda t: [*TRAIN, "--reward_funcs", "vowel_start", "nope"], "'nope'"),
    ("reward-needs-a-column", lambda t: [*TRAIN, "--reward_funcs", "boxed_answer"], "'answer' column"),
    (
        "num-generations-does-not-divide",
        lambda t: [*TRAIN, "--num_generations", "5"],
        "must be divisible by num_generations (5)",
    ),
    ("invalid-config-value", lambda t: [*TRAIN, "--maxent_tau", "-1"], "maxent_tau=-1.0 is invalid"),
    ("unknown-mode-key", lambda t: [*TRAIN, "--maxent_mode_key", "nope"], "maxent_mode_key='nope'"),
    ("invalid-choice", lambda t: [*TRAIN, "--maxent_objective", "best"], "'best'"),
    (
        "missing-checkpoint",
        lambda t: [*TRAIN, "--resume_from_checkpoint", str(t / "checkpoint-9")],
        "resume_from_checkpoint=",
    ),
    (
        "resume-true-without-checkpoint",
        lambda t: [*TRAIN, "--output_dir", str(t), "--resume_from_checkpoint", "true"],
        "holds no checkpoint-<step> folder to resume from",
    ),
    (
        "resume-only-partial-checkpoints",
        lambda t: [*TRAIN, "--resume_from_checkpoint", _partial_checkpoint(t)],
        "no complete checkpoint in",
    ),
    (
        "resume-a-partial-checkpoint",
        lambda t: [*TRAIN, "--resume_from_checkpoint", str(Path(_partial_checkpoint(t)) / "checkpoint-2")],
        "is not a checkpoint (no trainer_state.json)",
    ),
    (
        "eval-split-missing",
        lambda t: [*TRAIN, *_EVAL, "--dataset_name", _prompts(t)],
        "(split 'test')",
    ),
    (
        "streaming-without-max-steps",
        lambda t: [*TRAIN, "--dataset_name", _prompts(t), "--dataset_streaming", "true", "--max_steps", "-1"],
        "dataset_streaming=True needs max_steps",
    ),
    (
        "streaming-with-dynamic-sampling",
        lambda t: [*TRAIN, "--dataset_name", _prompts(t), "--dataset_streaming", "true", "--dynamic_sampling", "true"],
        "cannot be combined with dynamic_sampling",
    ),
    ("quantized-tiny-model", lambda t: [*TRAIN, "--load_in_4bit", "true"], "the 'tiny' model is built in-process"),
    (
        "4-and-8-bit",
        lambda t: [*TRAIN, "--load_in_4bit", "true", "--load_in_8bit", "true"],
        "can't use 8 bit and 4 bit precision at the same time",
    ),
    ("unknown-attention", lambda t: [*TRAIN, "--attn_implementation", "nope"], "attn_implementation='nope'"),
    ("unknown-dtype", lambda t: [*TRAIN, "--dtype", "float8"], "invalid choice: 'float8'"),
    ("demo-steps", lambda t: ["demo", "--steps", "0"], "--steps 0"),
    ("demo-unknown-flag", lambda t: ["demo", "--fast"], "--fast"),
    ("unknown-command", lambda t: ["fly"], "'fly'"),
    ("no-command", lambda t: [], "expected a command"),
]


@pytest.fixture
def quiet_datasets():
    """No "Generating train split" progress bars from loading a local file before its columns are checked."""
    datasets.disable_progress_bars()
    yield
    datasets.enable_progress_bars()


@pytest.mark.parametrize(("argv", "expected"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_bad_input_exits_2_with_one_line(argv, expected, tmp_path, capsys, quiet_datasets):
    code = main(argv(tmp_path))
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("maxent-grpo"), err
    assert "error:" in err and expected in err, err
    assert "Traceback" not in err


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_vllm_requested_but_not_installed(capsys):
    code = main([*TRAIN, "--use_vllm", "true", "--vllm_mode", "colocate"])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "use_vllm=True" in err and "vLLM" in err, err


def test_only_partial_checkpoints_is_one_line_from_the_console_script(tmp_path):
    result = run_cli([*TRAIN, "--resume_from_checkpoint", _partial_checkpoint(tmp_path)], offline_env(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"maxent-grpo train: error: resume_from_checkpoint={str(tmp_path / 'run')!r}: no complete checkpoint in "
        f"{str(tmp_path / 'run')!r} (every checkpoint-<step> folder lacks trainer_state.json: their saves did not "
        "finish)"
    )


def test_console_script_reports_bad_input_in_one_line(tmp_path):
    result = run_cli([*TRAIN, "--maxent_tau", "-1"], offline_env(tmp_path))
    assert result.returncode == 2
    assert (
        result.stderr.strip() == "maxent-grpo train: error: maxent_tau=-1.0 is invalid: expected a finite number >= 0."
    )
    assert result.stdout == ""
