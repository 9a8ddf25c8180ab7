"""`maxent-grpo train --help`: a short grouped list, answered without importing torch; `--help-all`: every field.

What a command imports shows only in a fresh interpreter, so those runs are subprocesses; the rest runs `main` in
this process.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from maxent_grpo.cli import main
from maxent_grpo.cli.recipe import RecipeParser
from maxent_grpo.cli.train_help import FIELD_GROUPS
from tests.e2e.cli_runner import offline_env, run_cli

# Run in a fresh interpreter: the exit code of `main(argv)`, then the heavy modules it imported.
_IMPORTS_OF = """
import sys
from maxent_grpo.cli import main
code = main(sys.argv[1:])
heavy = [name for name in ("datasets", "torch", "transformers", "trl.trainer.grpo_config") if name in sys.modules]
print(code, "imported:", ",".join(heavy) or "nothing heavy", file=sys.stderr)
"""


def _fresh(argv: list[str], tmp_path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _IMPORTS_OF, *argv],
        cwd=tmp_path,
        env=offline_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_train_help_is_short_grouped_and_names_config_and_help_all(tmp_path):
    start = time.monotonic()
    result = run_cli(["train", "--help"], offline_env(tmp_path), cwd=tmp_path)
    seconds = time.monotonic() - start
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "usage: maxent-grpo train [--config RECIPE.yaml] [--FIELD VALUE ...] [-h | --help-all]"
    assert len(lines) < 150, len(lines)  # the full list is some 1,400 lines
    for title, fields in FIELD_GROUPS:
        assert f"{title}:" in lines
        for name, metavar, _ in fields:
            assert any(line.lstrip().startswith(f"--{name} {metavar}") for line in lines), name
    assert "--help-all" in result.stdout and "maxent-grpo config-reference" in result.stdout
    assert result.stderr == ""
    assert seconds < 5, seconds  # it was the full parser's 5 to 7 s: torch, transformers and TRL imported first


@pytest.mark.parametrize(
    ("argv", "code", "output"),
    [
        (["train", "--help"], "0", "usage: maxent-grpo train [--config RECIPE.yaml]"),
        (["train", "-h"], "0", "usage: maxent-grpo train [--config RECIPE.yaml]"),
        (["train"], "2", "required: --model_name_or_path, --dataset_name, or a recipe that sets them"),
        (["train", "--max_steps", "5"], "2", "required: --model_name_or_path, --dataset_name, or a recipe"),
    ],
    ids=["help", "h", "no-arguments", "only-max-steps"],
)
def test_help_and_a_command_line_without_model_or_data_import_no_torch(argv, code, output, tmp_path):
    result = _fresh(argv, tmp_path)
    *said, imports = result.stderr.strip().splitlines()
    assert imports == f"{code} imported: nothing heavy", result.stderr[-3000:]
    assert output in result.stdout + "\n".join(said)
    if code == "2":
        assert len(said) == 1 and said[0].startswith("maxent-grpo train: error: "), said


def test_help_all_lists_every_field_with_config_in_its_usage(capsys):
    assert main(["train", "--help-all"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: maxent-grpo train [--config RECIPE.yaml] [--FIELD VALUE ...] [-h | --help-all]")
    for name in ("config", "dataset_name", "vllm_server_timeout", "maxent_tau", "lora_r", "use_cpu", "help-all"):
        assert f"  --{name} " in text or f"  --{name}\n" in text, name
    assert "maxent-grpo config-reference" in text
    assert text.count("\n") > 1000


def test_every_field_of_the_short_list_is_a_field_of_the_train_parser():
    options = {option for action in RecipeParser()._actions for option in action.option_strings}
    listed = [name for _, fields in FIELD_GROUPS for name, _, _ in fields]
    assert len(listed) == len(set(listed))
    assert [name for name in listed if f"--{name}" not in options] == []


def test_the_short_list_names_the_built_in_rewards_and_mode_keys():
    from maxent_grpo.objective.mode_keys import BUILTIN_MODE_KEYS
    from maxent_grpo.rewards import REWARDS

    helps = {name: text for _, fields in FIELD_GROUPS for name, _, text in fields}
    assert all(reward in helps["reward_funcs"] for reward in REWARDS), helps["reward_funcs"]
    assert all(key in helps["maxent_mode_key"] for key in BUILTIN_MODE_KEYS), helps["maxent_mode_key"]
