"""Where a benchmark writes its figures: a git-ignored folder by default, the committed results only when asked.

The README and the benchmark pages of the docs (`docs/benchmarks/`) quote the figures committed under
`benchmarks/results/`; running a benchmark to try something must not overwrite them. ``--update-results``
refreshes them on purpose; ``--output-dir`` picks any other folder.
"""

from __future__ import annotations

import argparse
from pathlib import Path

#: Default parent folder of a benchmark's output, relative to the working directory (`outputs/` is git-ignored).
DEFAULT_ROOT = Path("outputs") / "benchmarks"


def add_output_arguments(parser: argparse.ArgumentParser, name: str, committed: Path) -> None:
    """``--output-dir`` (default ``outputs/benchmarks/<name>``) or ``--update-results`` (write to ``committed``)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--output-dir",
        type=Path,
        default=DEFAULT_ROOT / name,
        help="folder for the figures (default: %(default)s)",
    )
    group.add_argument(
        "--update-results",
        dest="output_dir",
        action="store_const",
        const=committed,
        help=f"write to the committed results, {committed}, replacing them",
    )
