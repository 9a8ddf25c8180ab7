"""The runnable examples run offline, shortened."""

from __future__ import annotations

import re
import socket
import subprocess
import sys

import pytest

from tests.e2e.cli_runner import ROOT, offline_env, run
from tests.support.doc_snippets import snippet

pytestmark = pytest.mark.slow


def test_trl_pr_benchmark_runs_offline_on_the_tiny_model(tmp_path):
    script = ROOT / "examples" / "trl_pr_benchmark.py"
    command = [sys.executable, str(script), "--tiny", "--max-steps", "2", "--output-dir", str(tmp_path / "out")]
    result = run(command, offline_env(tmp_path))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert re.search(r"^2 steps in [\d.]+ s .*mean reward first step [\d.]+, last step [\d.]+$", result.stdout, re.M)
    assert "FutureWarning" not in result.stderr  # transformers / TRL deprecation notices stay quiet, as in the CLI


def test_trl_pr_benchmark_hands_its_comparison_to_maxent_grpo_bench_with_the_options_it_does_not_know(
    tmp_path, monkeypatch
):
    # What `maxent-grpo bench` does with these arguments, two arms over two paired seeds of the tiny recipe with
    # --set and --margin, is tests/integration/test_ab_smoke.py's end-to-end run.
    from examples import trl_pr_benchmark

    received: list[list[str]] = []
    monkeypatch.setattr(trl_pr_benchmark, "maxent_grpo_command", lambda argv: received.append(argv) or 0)
    shrink = ["--set=gradient_accumulation_steps=2", "--margin=loss=0.5"]
    output_dir = str(tmp_path / "out")
    for objective, arm in (("grpo", "after"), ("listwise", "listwise")):
        argv = ["--tiny", "--ab", "2", "--max-steps", "2", "--objective", objective, *shrink]
        monkeypatch.setattr(sys, "argv", ["trl_pr_benchmark.py", *argv, "--output-dir", output_dir])
        assert trl_pr_benchmark.main() == 0
        assert received.pop() == [
            "bench",
            f"--arms=before,{arm}",
            "--recipe=tiny",
            "--seeds=2",
            f"--output-dir={tmp_path / 'out' / 'ab'}",
            "--max-steps=2",
            *shrink,
        ]


def test_custom_mode_key_example_resolves_its_key_by_dotted_path(tmp_path):
    result = run(
        [sys.executable, str(ROOT / "examples" / "custom_mode_key.py"), "--max-steps", "2"], offline_env(tmp_path)
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert re.search(r"^before: reward [\d.]+, vowels \d/5, coverage [\d.]+$", result.stdout, re.M)
    assert re.search(r"^after:  reward [\d.]+, vowels \d/5, coverage [\d.]+$", result.stdout, re.M)
    assert "FutureWarning" not in result.stderr


def test_readme_quickstart_shows_the_reward_rising_without_upstream_warnings(tmp_path):
    script = tmp_path / "quickstart.py"
    script.write_text(snippet(ROOT / "README.md", "quickstart"))
    result = subprocess.run(  # in tmp_path: the quickstart writes to outputs/quickstart
        [sys.executable, str(script)], cwd=tmp_path, env=offline_env(tmp_path), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    match = re.search(r"^mean reward: steps 1-10 ([\d.]+), steps 41-50 ([\d.]+)$", result.stdout, re.M)
    assert match, result.stdout[-2000:]
    first, last = map(float, match.groups())
    assert first < 0.3 and last > 0.7, (first, last)
    # The figures the README quotes are the ones it prints (OMP_NUM_THREADS=1, the default seed).
    quoted = f"(the snippet prints `steps 1-10 {match.group(1)}, steps 41-50 {match.group(2)}` with the default seed)"
    assert quoted in " ".join((ROOT / "README.md").read_text().split()), match.group(0)
    assert "Warning" not in result.stderr, result.stderr[-4000:]


def test_remote_reward_example_trains_against_its_service(tmp_path):
    script = str(ROOT / "examples" / "remote_reward.py")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    service = subprocess.Popen(
        [sys.executable, script, "serve", "--port", str(port)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert service.stdout.readline() == f"scoring service on http://127.0.0.1:{port}\n"
        command = [sys.executable, script, "train", "--url", f"http://127.0.0.1:{port}", "--max-steps", "2"]
        result = run(command, offline_env(tmp_path))
    finally:
        service.kill()
        service.wait()
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert result.stdout.strip().splitlines()[-1] == "2 steps; rows left unscored: 0"
