"""Which checkpoint `resume_from_checkpoint` names, the way the Hugging Face Trainer understands it.

`true` means the latest checkpoint in `output_dir`, and a folder holding `checkpoint-<step>` folders (an `output_dir`)
means its latest one. Transformers' `get_last_checkpoint` picks the highest step even when that save was interrupted
(no `trainer_state.json`, or one cut short: a full disk, a killed or interrupted job), and then fails after the
weights have loaded; here such a partial checkpoint is skipped with a warning and the latest complete one is used.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import sort_checkpoints

logger = logging.getLogger(__name__)

_TRUE = {"true", "yes", "1"}
_FALSE = {"false", "no", "0"}


class CheckpointNotFoundError(ValueError):
    """`resume_from_checkpoint` names no complete checkpoint; the message is one sentence."""


def is_complete(checkpoint: Path) -> bool:
    """A checkpoint folder whose save finished: the Trainer writes `trainer_state.json` last, so it is there and whole
    JSON (a save interrupted while writing it leaves it empty, a full disk cut short)."""
    try:
        json.loads((checkpoint / TRAINER_STATE_NAME).read_bytes())
    except (OSError, ValueError):
        return False
    return True


def _why_partial(checkpoint: Path) -> str:
    if (checkpoint / TRAINER_STATE_NAME).is_file():
        return f"its {TRAINER_STATE_NAME} is empty or cut short"
    return f"it has no {TRAINER_STATE_NAME}"


def latest_complete_checkpoint(folder: Path) -> Path | None:
    """The `checkpoint-<step>` folder of ``folder`` with the highest step that is complete; partial ones above it are
    skipped with a warning each. None (and no warning) when there is no complete one."""
    skipped: list[Path] = []
    for checkpoint in reversed([Path(path) for path in sort_checkpoints(str(folder))]):
        if is_complete(checkpoint):
            for partial in skipped:
                logger.warning(
                    "Skipping %s: %s (its save did not finish); resuming from %s.",
                    partial,
                    _why_partial(partial),
                    checkpoint.name,
                )
            return checkpoint
        skipped.append(checkpoint)
    return None


def resolve_resume_checkpoint(value: str | None, output_dir: str) -> str | None:
    """The checkpoint folder to resume from, or None to start afresh.

    ``value`` is `resume_from_checkpoint` as given: None or 'false' (start afresh), 'true' (the latest complete
    checkpoint of ``output_dir``), a checkpoint folder, or a folder holding checkpoints (its latest complete one).

    Raises:
        CheckpointNotFoundError: no such folder, a partial checkpoint, or a folder without a complete checkpoint.
    """
    if value is None or value.strip().lower() in _FALSE:
        return None
    folder = Path(output_dir if value.strip().lower() in _TRUE else value).expanduser()
    if not folder.is_dir():
        raise CheckpointNotFoundError(
            f"resume_from_checkpoint={value!r}: {str(folder)!r} is not a directory: expected 'true', an output_dir "
            "or a checkpoint folder such as <output_dir>/checkpoint-<step>"
        )
    if (folder / TRAINER_STATE_NAME).is_file():  # a checkpoint named itself: the command's checks read its files
        return str(folder)
    checkpoint = latest_complete_checkpoint(folder)
    if checkpoint is not None:
        return str(checkpoint)
    if sort_checkpoints(str(folder)):
        raise CheckpointNotFoundError(
            f"resume_from_checkpoint={value!r}: no complete checkpoint in {str(folder)!r} (every checkpoint-<step> "
            f"folder lacks {TRAINER_STATE_NAME}: their saves did not finish)"
        )
    if value.strip().lower() in _TRUE:
        raise CheckpointNotFoundError(
            f"resume_from_checkpoint={value!r}: output_dir {str(folder)!r} holds no checkpoint-<step> folder to "
            "resume from"
        )
    raise CheckpointNotFoundError(
        f"resume_from_checkpoint={value!r}: {str(folder)!r} is not a checkpoint (no {TRAINER_STATE_NAME}) and holds "
        "no checkpoint-<step> folder"
    )
