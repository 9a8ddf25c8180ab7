"""What a benchmark run was built from: package version, git commit, session stamp and run name."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import maxent_grpo

UNKNOWN = "unknown"
_SOURCE_DIR = Path(maxent_grpo.__file__).resolve().parent


def _git(*args: str) -> str | None:
    """Output of a read-only git command run in the package's source tree, or None outside a git checkout."""
    try:
        completed = subprocess.run(
            ["git", "--no-optional-locks", "-C", str(_SOURCE_DIR), *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return None
    return completed.stdout.strip()


def git_commit() -> str:
    """``git rev-parse HEAD`` of the source tree the package runs from, or "unknown"."""
    return _git("rev-parse", "HEAD") or UNKNOWN


def git_dirty() -> bool | None:
    """Whether tracked files differ from that commit (the run measured uncommitted code); None when unknown."""
    status = _git("status", "--porcelain", "--untracked-files=no")
    return None if status is None else bool(status)


def package_version() -> str:
    return maxent_grpo.__version__


def session_stamp() -> str:
    """UTC time the benchmark started; it keeps run names of repeated benchmarks apart in one trackio project."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime())


def run_name(arm: str, seed: int, recipe_hash: str, session: str) -> str:
    """E.g. ``after-seed1-3f2a9c1d-20250101-120000``: arm, seed, recipe hash (8 hex digits), session."""
    return f"{arm}-seed{seed}-{recipe_hash[:8]}-{session}"
