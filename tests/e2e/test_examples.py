"""The runnable examples run offline, shortened."""

from __future__ import annotations

import re
import sys

import pytest

from tests.e2e.cli_runner import ROOT, offline_env, run

pytestmark = pytest.mark.slow


def test_trl_pr_benchmark_runs_offline_on_the_tiny_model(tmp_path):
    script = ROOT / "examples" / "trl_pr_benchmark.py"
    command = [sys.executable, str(script), "--tiny", "--max-steps", "2", "--output-dir", str(tmp_path / "out")]
    result = run(command, offline_env(tmp_path))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert re.search(r"^2 steps in [\d.]+ s .*mean reward first step [\d.]+, last step [\d.]+$", result.stdout, re.M)


def test_custom_mode_key_example_resolves_its_key_by_dotted_path(tmp_path):
    result = run(
        [sys.executable, str(ROOT / "examples" / "custom_mode_key.py"), "--max-steps", "2"], offline_env(tmp_path)
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert re.search(r"^before: reward [\d.]+, vowels \d/5, coverage [\d.]+$", result.stdout, re.M)
    assert re.search(r"^after:  reward [\d.]+, vowels \d/5, coverage [\d.]+$", result.stdout, re.M)
