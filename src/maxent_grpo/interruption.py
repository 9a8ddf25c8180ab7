"""What `maxent-grpo train` says when it is interrupted (Ctrl-C): the checkpoint to resume from."""

from __future__ import annotations

import re
from pathlib import Path

from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

_CHECKPOINT = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")


def latest_complete_checkpoint(output_dir: str) -> Path | None:
    """The ``checkpoint-<step>`` folder of ``output_dir`` with the highest step that holds its trainer state."""
    folder = Path(output_dir)
    if not folder.is_dir():
        return None
    complete = [
        (int(match.group(1)), path)
        for path in folder.iterdir()
        if (match := _CHECKPOINT.match(path.name)) and (path / TRAINER_STATE_NAME).is_file()
    ]
    return max(complete)[1] if complete else None


def interrupted_message(output_dir: str) -> str:
    """One line: interrupted, and the ``--resume_from_checkpoint`` to continue with (if any checkpoint is complete)."""
    checkpoint = latest_complete_checkpoint(output_dir)
    if checkpoint is None:
        return f"interrupted before a checkpoint was saved in {output_dir!r}; nothing to resume from"
    return f"interrupted; continue with --resume_from_checkpoint {checkpoint}"
