"""What `maxent-grpo train` says when it is interrupted (Ctrl-C): the checkpoint to resume from."""

from __future__ import annotations

from pathlib import Path

from transformers.trainer_utils import sort_checkpoints

from maxent_grpo.training.checkpoints.resume import is_complete


def interrupted_message(output_dir: str) -> str:
    """One line: interrupted, and the ``--resume_from_checkpoint`` to continue with (if any checkpoint is complete)."""
    complete = [path for path in map(Path, sort_checkpoints(output_dir)) if is_complete(path)]
    if not complete:
        return f"interrupted before a checkpoint was saved in {output_dir!r}; nothing to resume from"
    return f"interrupted; continue with --resume_from_checkpoint {complete[-1]}"
