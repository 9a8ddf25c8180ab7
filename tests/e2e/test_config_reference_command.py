"""`maxent-grpo config-reference`: the docs' configuration reference is generated and kept current."""

from __future__ import annotations

import shlex
import subprocess

from maxent_grpo.cli import main
from maxent_grpo.cli.config_reference import (
    COMMAND,
    END_MARKER,
    REFERENCE_PAGE,
    START_MARKER,
    current_block,
    render_config_reference,
)
from tests.e2e.cli_runner import ROOT, executable


def test_docs_configuration_reference_is_up_to_date():
    page = (ROOT / REFERENCE_PAGE).read_text(encoding="utf-8")
    assert current_block(page) == render_config_reference().strip(), (
        f"{REFERENCE_PAGE}'s configuration reference is out of date: run `{COMMAND}`"
    )
    assert REFERENCE_PAGE in COMMAND  # the command the page and the failure message name writes this page


def test_the_reference_is_in_the_docs_only():
    # Written once: the README links to the page instead of holding a second copy.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert START_MARKER not in readme and REFERENCE_PAGE in readme


def test_reference_lists_own_fields_and_script_arguments_only():
    reference = render_config_reference()
    for name in ("maxent_objective", "maxent_mode_key", "generation_max_retries", "kl_target", "reward_funcs"):
        assert f"| `{name}` |" in reference
    for trl_script_field in ("dataset_name", "dataset_test_split", "model_name_or_path", "use_peft", "lora_r"):
        assert f"`{trl_script_field}`" in reference  # named, with TRL's meaning
    for inherited in ("learning_rate", "num_generations", "use_vllm"):  # TRL's fields are documented by TRL
        assert f"| `{inherited}` |" not in reference


def test_write_replaces_only_the_marked_block(tmp_path, capsys):
    readme = tmp_path / "README.md"
    outdated = f"# Title\n\nbefore\n\n{START_MARKER}\nan outdated line\n{END_MARKER}\n\nafter\n"
    readme.write_text(outdated, encoding="utf-8")
    assert main(["config-reference", "--write", str(readme)]) == 0
    text = readme.read_text(encoding="utf-8")
    assert text.startswith("# Title\n\nbefore\n\n") and text.endswith(f"{END_MARKER}\n\nafter\n")
    assert "an outdated line" not in text and current_block(text) == render_config_reference().strip()
    assert main(["config-reference", "--write", str(readme)]) == 0
    assert "already up to date" in capsys.readouterr().out


def test_write_without_markers_is_bad_input(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("# No markers here\n", encoding="utf-8")
    assert main(["config-reference", "--write", str(readme)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and START_MARKER in err


def test_a_reader_that_stops_early_ends_the_command_without_a_traceback():
    # `maxent-grpo config-reference | true`: the reader is gone before the reference is written (`| head` in a race).
    command = f"{shlex.quote(executable('maxent-grpo'))} config-reference | true"
    result = subprocess.run(["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, timeout=120)
    assert result.returncode == 141  # the shell's code for a command ended by a closed pipe
    assert "Traceback" not in result.stderr, result.stderr
