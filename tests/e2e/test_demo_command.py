"""`maxent-grpo demo`, shortened, as a real subprocess of the console script."""

from __future__ import annotations

import re

import pytest

from maxent_grpo.cli.trackio_show import PLOT_ORDER
from tests.e2e.cli_runner import offline_env, run_cli

pytestmark = pytest.mark.slow

ANSWERS = ("a", "e", "i", "o", "u", "other")


def _histogram(out: str, title: str) -> dict[str, int]:
    """The answer counts printed under the block whose first line starts with ``title``."""
    header = re.search(
        rf"^{re.escape(title)}: reward [01]\.\d\d, answer entropy [01]\.\d\d, vowels used [0-5]/5$", out, re.MULTILINE
    )
    assert header, out
    lines = out[header.end() :].lstrip("\n").splitlines()[: len(ANSWERS)]
    counts = {}
    for answer, line in zip(ANSWERS, lines, strict=True):
        row = re.fullmatch(rf"  {answer}\s*\|(#*) *\| +(\d+)", line)
        assert row, (answer, line, out)
        counts[answer] = int(row.group(2))
    return counts


def test_demo_trains_grpo_and_maxent_side_by_side_and_logs_both_to_local_trackio(tmp_path):
    result = run_cli(["demo", "--steps", "3", "--seed", "1"], offline_env(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    histograms = {
        title: _histogram(out, title)
        for title in (
            "untrained model (both methods start here)",
            "GRPO (stock TRL) after 3 steps",
            "MaxEnt listwise after 3 steps",
        )
    }
    for counts in histograms.values():  # every sampled answer lands in one bar
        assert sum(counts.values()) == 512, histograms
    assert "from seed 1, 3 steps of 16 completions each" in out
    runs = re.search(r"^Compare the runs (grpo-seed1-\S+) and (maxent-seed1-\S+) with: (.+)$", out, re.MULTILINE)
    # The dashboard opens on reward and entropy, before TRL's profiling timings.
    assert runs and runs.group(3) == f"TRACKIO_PLOT_ORDER='{PLOT_ORDER}' trackio show --project maxent-grpo-demo", out
    assert PLOT_ORDER.startswith("reward,entropy,")
    assert out.rstrip().splitlines()[-1].endswith(": maxent-grpo train --config configs/recipes/demo.yaml"), out
    assert (
        out.count("* Run finished. Writing the last logs to trackio's local database (they stay on this machine)") == 2
    )
    assert "Uploading logs" not in out
    # stderr is a pipe here, as in a log file: progress lines per method, no carriage-return redraws, no colour codes
    for method in ("GRPO \\(stock TRL\\)", "MaxEnt listwise"):
        assert re.search(rf"^{method}: 100% \(3/3 steps\), reward=[01]\.\d\d$", result.stderr, re.MULTILINE), (
            result.stderr
        )
    assert "\r" not in result.stderr
    assert "\x1b[" not in out + result.stderr
    database = tmp_path / "trackio" / "maxent-grpo-demo.db"
    assert database.is_file() and database.stat().st_size > 0, sorted(p.name for p in tmp_path.rglob("*"))


def test_demo_saves_both_trained_models(tmp_path):
    result = run_cli(
        ["demo", "--steps", "1", "--no-trackio", "--output-dir", str(tmp_path / "out")], offline_env(tmp_path)
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for method in ("grpo", "maxent"):
        assert (tmp_path / "out" / method / "model.safetensors").is_file(), sorted(tmp_path.rglob("*"))
    assert "trackio" not in result.stdout
    assert not (tmp_path / "trackio").exists()
