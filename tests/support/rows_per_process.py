"""A reward for `maxent-grpo train` runs under `accelerate launch` that also counts the rows each process scored.

``maxent-grpo train --reward_funcs tests.support.rows_per_process.counted_length`` (the working directory the
repository root): each call appends the number of rows it scored to ``rows-<RANK>.txt`` in the folder
``ROWS_SEEN_DIR`` names (set by the test), one line per call. The reward itself is the completion's length.
"""

from __future__ import annotations

import os
from pathlib import Path


def counted_length(prompts, completions, **kwargs) -> list[float]:
    folder = Path(os.environ["ROWS_SEEN_DIR"])
    with (folder / f"rows-{os.environ.get('RANK', '0')}.txt").open("a") as rows:
        rows.write(f"{len(prompts)}\n")
    return [float(len(completion)) for completion in completions]


def rows_seen(folder: Path, rank: int) -> int:
    """The rows process ``rank`` scored in all."""
    return sum(int(line) for line in (folder / f"rows-{rank}.txt").read_text().split())
