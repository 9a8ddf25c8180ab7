"""What the README and the docs tell a user to paste runs as written (shortened only by added arguments), the metrics
glossary lists every key the package logs, and the README's links lead somewhere. The README's Quickstart runs in
`test_examples.py`; the docs build itself (warnings as errors, MathJax from the site's own copy) is a step of
`.ci/run`."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import shlex
import subprocess
import sys
from types import SimpleNamespace

import pytest

from maxent_grpo.training.generation import helpers
from maxent_grpo.training.generation.step import WEIGHT_SECONDS_KEYS, WEIGHT_STAT_KEYS
from maxent_grpo.training.reward_scoring.ledger import FUNCTION_COUNTERS
from tests.e2e.cli_runner import ROOT, offline_env, run_cli
from tests.support.doc_snippets import command_lines, snippet

README = ROOT / "README.md"
DOCS = ROOT / "docs"

# What each command of the README's command-line block gets added so that it runs in seconds: every command there
# must be listed, so a command added to the README is either shortened here or runs as it is.
SHORTER = {
    "demo": ["--steps", "1", "--no-trackio"],
    "train": ["--max_steps", "1", "--output_dir", "{tmp}/train"],
    "config-reference": [],
}


def _maxent_grpo_args(command: str) -> list[str]:
    words = shlex.split(command)
    assert words[0] == "maxent-grpo", command
    return words[1:]


@pytest.mark.slow
def test_readme_command_line_block_runs_on_the_tiny_model(tmp_path):
    commands = command_lines(snippet(README, "cli"))
    assert [_maxent_grpo_args(command)[0] for command in commands] == ["demo", "train", "config-reference"]
    for command in commands:
        args = _maxent_grpo_args(command)
        extra = [word.format(tmp=tmp_path) for word in SHORTER[args[0]]]
        result = run_cli([*args, *extra], offline_env(tmp_path))  # in the repository root, as the README says
        assert result.returncode == 0, (command, result.stdout[-2000:], result.stderr[-3000:])
    assert (tmp_path / "train" / "model.safetensors").is_file()


@pytest.mark.slow
def test_own_reward_function_of_the_docs_trains(tmp_path):
    page = DOCS / "guide" / "command-line.md"
    (tmp_path / "my_rewards.py").write_text(snippet(page, "my-rewards"))  # "in the working directory"
    (tmp_path / "configs").symlink_to(ROOT / "configs")  # the recipe path of the command, from there
    [command] = command_lines(snippet(page, "cli-own-rewards"))
    args = [*_maxent_grpo_args(command), "--max_steps", "1", "--logging_steps", "1", "--output_dir", "out"]
    result = run_cli(args, offline_env(tmp_path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    logs = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert isinstance(logs[0]["rewards/contains_digit/mean"], float), logs  # every logged figure is in the file


def test_the_reward_example_of_the_docs_takes_plain_and_chat_completions():
    namespace: dict = {}
    exec(snippet(DOCS / "guide" / "command-line.md", "my-rewards"), namespace)
    chat = [[{"role": "assistant", "content": "4 apples"}], [{"role": "assistant", "content": "none"}]]
    assert namespace["contains_digit"](completions=["4 apples", "none"]) == [1.0, 0.0]
    assert namespace["contains_digit"](completions=chat) == [1.0, 0.0]


@pytest.mark.slow
def test_reward_timeout_command_of_the_docs_trains(tmp_path):
    (tmp_path / "my_rewards.py").write_text(
        "def judge(completions, **kwargs):\n    return [float(len(set(text))) for text in completions]\n"
    )
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    [command] = command_lines(snippet(DOCS / "guide" / "reward-functions.md", "cli-reward-timeout"))
    args = [*_maxent_grpo_args(command), "--max_steps", "1", "--logging_steps", "1", "--output_dir", "out"]
    result = run_cli(args, offline_env(tmp_path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    logs = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert logs[0]["scoring/judge/timed_out"] == 0, logs  # the judge's counts are logged, with the timeout on


@pytest.mark.slow
def test_backend_example_of_the_docs_retries_the_completions_it_loses(tmp_path):
    script = tmp_path / "custom_backend.py"
    script.write_text(snippet(DOCS / "guide" / "backends.md", "custom-backend"))
    result = subprocess.run(  # in tmp_path: the example writes to outputs/custom_backend
        [sys.executable, str(script)], cwd=tmp_path, env=offline_env(tmp_path), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    match = re.search(r"^retried prompt groups: (\d+), dropped prompt groups: (\d+)$", result.stdout, re.M)
    assert match, result.stdout[-2000:]
    assert int(match.group(1)) >= 1  # a fifth of the completions lost: some group came back short and was retried


# ---------------------------------------------------------------------------------------------- the metrics glossary
_METRIC_FAMILIES = ("generation", "maxent", "tools", "dynamic_sampling", "completions", "sampling", "scoring")


def _logged_keys() -> set[str]:
    """Every metric key written as a string literal in the package, plus the backend weight counters and seconds it
    logs as ``generation/<key>`` (`WEIGHT_STAT_KEYS`, `WEIGHT_SECONDS_KEYS`) and the reward functions' counters it
    logs as ``scoring/<name>/<key>`` (`FUNCTION_COUNTERS`)."""
    pattern = re.compile(rf"^({'|'.join(_METRIC_FAMILIES)})/[a-z_]+(/[a-z_]+)*$")
    keys = {f"generation/{key}" for key in (*WEIGHT_STAT_KEYS, *WEIGHT_SECONDS_KEYS)}
    keys |= {f"scoring/<name>/{key}" for key in FUNCTION_COUNTERS}
    for path in (ROOT / "src" / "maxent_grpo").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and pattern.match(node.value):
                keys.add(node.value)
    return keys


def test_metrics_glossary_lists_every_key_the_package_logs():
    keys = _logged_keys()
    assert {"generation/dropped_prompts", "maxent/tau", "dynamic_sampling/rounds", "tools/failed_episodes"} <= keys
    assert {"scoring/unscored_rows", "scoring/<name>/failed", "generation/weight_reload_seconds"} <= keys
    glossary = (DOCS / "metrics.md").read_text(encoding="utf-8")
    missing = sorted(key for key in keys if f"`{key}`" not in glossary)
    assert not missing, f"docs/metrics.md does not describe {missing}"


# ------------------------------------------------------------------------------------------- the helpers' API page
def test_helpers_api_page_documents_every_public_name():
    # The page lists the helpers one by one (a summary, then each in full), so a new public helper must be added there.
    page = (DOCS / "api" / "helpers.rst").read_text(encoding="utf-8")
    for name in helpers.__all__:
        kind = "autoclass" if isinstance(getattr(helpers, name), type) else "autofunction"
        assert f"\n   {name}\n" in page, f"docs/api/helpers.rst: {name} is missing from the summary"
        assert f".. {kind}:: {name}\n" in page, f"docs/api/helpers.rst: no `.. {kind}:: {name}`"


# -------------------------------------------------------------------------------------------------- the README's links
def test_readme_links_to_files_that_exist():
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [target.split("#", 1)[0] for target in targets if not re.match(r"[a-z]+://", target)]
    assert "docs/configuration.md" in local and "docs/metrics.md" in local
    missing = [target for target in local if not (ROOT / target).exists()]
    assert not missing, f"README.md links to {missing}, which do not exist"


def test_readme_fits_on_a_few_screens():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 250


def test_every_page_gives_the_main_suite_the_readme_tier_tables_time():
    pages = [README, DOCS / "getting-started.md"]
    table = re.search(r"\| the main suite: .* \| about ([\d.]+ min) \|", README.read_text(encoding="utf-8"))
    assert table, "README.md: the tier table has no main-suite row"
    comment = re.compile(r"# the main (?:test )?suite \(what CI runs first\): about ([\d.]+ min)")
    stated = {page.name: comment.findall(page.read_text(encoding="utf-8")) for page in pages}
    assert all(stated.values()) and {time for times in stated.values() for time in times} == {table.group(1)}, stated


def test_the_docs_build_fails_where_a_page_would_load_mathjax_from_the_network(tmp_path):
    spec = importlib.util.spec_from_file_location("docs_conf", DOCS / "conf.py")
    conf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conf)
    app = SimpleNamespace(outdir=str(tmp_path), builder=SimpleNamespace(format="html"))
    (tmp_path / "_static" / "mathjax").mkdir(parents=True)
    (tmp_path / conf.LOCAL_MATHJAX).write_text("")
    page = tmp_path / "guide" / "objective.html"
    page.parent.mkdir()
    page.write_text('<script defer="defer" src="../_static/mathjax/tex-chtml.js"></script>')
    conf._check_local_mathjax(app, None)  # the site's own copy: the build passes
    page.write_text('<script defer src="https://cdn.jsdelivr.net/npm/mathjax@4/tex-mml-chtml.js"></script>')
    with pytest.raises(RuntimeError, match=r"from _static/mathjax/tex-chtml.js; these do not: .*objective"):
        conf._check_local_mathjax(app, None)
    (tmp_path / conf.LOCAL_MATHJAX).unlink()
    with pytest.raises(RuntimeError, match="is missing from the built site"):
        conf._check_local_mathjax(app, None)
