"""Runs the benchmark's runs one after another, interleaved across arms, each in its own worker process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from maxent_grpo.bench.spec import RunSpec

# Environment variables that would send trackio's records to a Space or a server instead of local storage.
REMOTE_TRACKIO_VARIABLES = ("TRACKIO_SPACE_ID", "TRACKIO_SERVER_URL", "TRACKIO_BUCKET_ID", "TRACKIO_DATASET_ID")
FAILURE_TAIL_LINES = 40


@dataclass(frozen=True)
class RunResult:
    spec: RunSpec
    log_history: list[dict[str, Any]]
    train_seconds: float  # inside `trainer.train()`
    process_seconds: float  # the whole worker process: imports, model and data set building, training


def interleave(arms: Sequence[str], seeds: Sequence[int]) -> list[tuple[str, int]]:
    """(arm, seed) pairs in run order: every arm for seed 1, then every arm for seed 2, ... (A B A B ...)."""
    return [(arm, seed) for seed in seeds for arm in arms]


def worker_environment(trackio_dir: Path | None) -> dict[str, str]:
    """This process's environment for the workers, with trackio kept local (and in ``trackio_dir`` when given)."""
    env = {name: value for name, value in os.environ.items() if name not in REMOTE_TRACKIO_VARIABLES}
    if trackio_dir is not None:
        env["TRACKIO_DIR"] = str(trackio_dir.resolve())
    return env


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes}m{seconds:02d}s"


def _run_one(spec: RunSpec, work_dir: Path, env: dict[str, str]) -> RunResult:
    spec_path = work_dir / f"{spec.run_name}.spec.json"
    result_path = work_dir / f"{spec.run_name}.result.json"
    log_path = work_dir / f"{spec.run_name}.log"
    spec_path.write_text(spec.to_json())
    command = [sys.executable, "-m", "maxent_grpo.bench.worker", str(spec_path), str(result_path)]
    start = time.perf_counter()
    with log_path.open("w") as log:
        completed = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, check=False)
    process_seconds = time.perf_counter() - start
    if completed.returncode != 0:
        tail = "\n".join(log_path.read_text().splitlines()[-FAILURE_TAIL_LINES:])
        raise RuntimeError(f"Run {spec.run_name} failed (exit code {completed.returncode}). Its last output:\n{tail}")
    payload = json.loads(result_path.read_text())
    return RunResult(spec, payload["log_history"], payload["train_seconds"], process_seconds)


def run_all(specs: Sequence[RunSpec], env: dict[str, str], report: Callable[[str], None]) -> list[RunResult]:
    """Run ``specs`` in order; after each, ``report`` a line with its duration, the elapsed time and an ETA."""
    results: list[RunResult] = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="maxent-grpo-ab-") as work_dir:
        for index, spec in enumerate(specs, start=1):
            result = _run_one(spec, Path(work_dir), env)
            results.append(result)
            elapsed = time.perf_counter() - start
            eta = elapsed / index * (len(specs) - index)
            report(
                f"[{index}/{len(specs)}] {spec.run_name}: {result.process_seconds:.1f} s "
                f"(training {result.train_seconds:.1f} s); elapsed {_duration(elapsed)}, ETA {_duration(eta)}"
            )
    return results
