"""Benchmarks write to outputs/benchmarks/<name> by default; committed results change with --update-results only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from maxent_grpo.bench.command import build_parser
from tests.e2e.cli_runner import ROOT, executable, offline_env
from tests.support.benchmark_script import results_digest


def _run_in(cwd: Path, command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_benchmark_script_writes_outside_the_committed_results(tmp_path):
    before = results_digest()
    command = [sys.executable, str(ROOT / "benchmarks" / "dynamic_sampling.py"), "--steps", "1", "--seeds", "1"]
    result = _run_in(tmp_path, command, offline_env(tmp_path))
    assert result.returncode == 0, result.stderr[-4000:]
    assert json.loads((tmp_path / "outputs" / "benchmarks" / "dynamic_sampling" / "dynamic_sampling.json").read_text())
    assert results_digest() == before


def test_update_results_targets_the_committed_folder_and_excludes_output_dir(tmp_path):
    parser = build_parser()
    assert parser.parse_args([]).output_dir == Path("outputs/benchmarks/ab")
    assert parser.parse_args(["--update-results"]).output_dir == Path("benchmarks/results/ab")
    result = _run_in(
        ROOT,
        [executable("maxent-grpo"), "bench", "--output-dir", str(tmp_path), "--update-results"],
        offline_env(tmp_path),
    )
    assert result.returncode == 2
    assert "argument --update-results: not allowed with argument --output-dir" in result.stderr


def test_update_results_outside_a_source_checkout_is_refused(tmp_path):
    result = _run_in(tmp_path, [executable("maxent-grpo"), "bench", "--update-results"], offline_env(tmp_path))
    assert result.returncode == 2
    assert "--update-results writes benchmarks/results/ab of a source checkout: run from its root." in result.stderr
    assert not (tmp_path / "benchmarks").exists()
