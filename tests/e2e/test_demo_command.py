"""`maxent-grpo demo`, shortened, as a real subprocess of the console script."""

from __future__ import annotations

import re

import pytest

from tests.e2e.cli_runner import offline_env, run_cli

pytestmark = pytest.mark.slow


def test_demo_prints_before_after_table_and_logs_to_local_trackio(tmp_path):
    result = run_cli(["demo", "--steps", "3"], offline_env(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert re.search(r"^\s+before\s+after$", out, re.MULTILINE), out
    assert re.search(r"^mean reward\s+[01]\.\d\d\s+[01]\.\d\d$", out, re.MULTILINE), out
    assert re.search(r"^answer coverage\s+[01]\.\d\d\s+[01]\.\d\d$", out, re.MULTILINE), out
    assert re.search(r"^distinct vowels\s+[0-5]/5\s+[0-5]/5$", out, re.MULTILINE), out
    assert "after 3 steps" in out
    assert "trackio show --project maxent-grpo-demo" in out
    assert "* Run finished. Writing the last logs to trackio's local database (they stay on this machine)" in out
    assert "Uploading logs" not in out
    # stderr is a pipe here, as in a log file: progress lines, no carriage-return redraws, no colour codes
    assert re.search(r"^training: 100% \(3/3 steps\), reward=[01]\.\d\d$", result.stderr, re.MULTILINE), result.stderr
    assert "\r" not in result.stderr
    assert "\x1b[" not in out + result.stderr
    database = tmp_path / "trackio" / "maxent-grpo-demo.db"
    assert database.is_file() and database.stat().st_size > 0, sorted(p.name for p in tmp_path.rglob("*"))
