"""What a checkpoint holds beyond the Trainer's own files, and how a checkpoint save never leaves a false checkpoint.

- The controller state file (`CONTROLLER_STATE_FILE`): the listwise controllers' state at its top level, the dynamic
  sampler's under its own key. It is written before the Trainer's files, so a checkpoint with `trainer_state.json`
  (written last, after which the Trainer deletes checkpoints beyond `save_total_limit`) always has it.
- `removing_partial_checkpoint`: a checkpoint folder the save created and could not complete is removed, so that a
  partial checkpoint never looks like one to resume from; a complete one is kept.
- `missing_keys_after_load`: the keys a loaded checkpoint really lacks, less the tied weights it rightly leaves out.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from transformers.trainer import TRAINER_STATE_NAME

from maxent_grpo.training.checkpoints.save_errors import WRITE_ERRORS, SaveError, save_error

CONTROLLER_STATE_FILE = "maxent_controllers.json"


def write_extra_state(folder: str, state: dict[str, Any]) -> None:
    """Write ``state`` (JSON) as the checkpoint's controller state file, creating ``folder`` if needed."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, CONTROLLER_STATE_FILE), "w") as handle:
        json.dump(state, handle)


def read_extra_state(checkpoint: str | None) -> dict[str, Any] | None:
    """The controller state file of ``checkpoint``, or None when there is none."""
    path = None if checkpoint is None else os.path.join(checkpoint, CONTROLLER_STATE_FILE)
    if path is None or not os.path.exists(path):
        return None
    with open(path) as handle:
        return json.load(handle)


@contextmanager
def removing_partial_checkpoint(folder: str, *, writes: bool) -> Iterator[None]:
    """Remove ``folder`` if the save inside this block fails before the checkpoint is complete.

    Only a folder this block created is removed, and only by the process that writes (``writes``,
    `TrainingArguments.should_save`). A write failure (full disk, quota) is raised as one `SaveError` naming the
    checkpoint; anything else, KeyboardInterrupt included, is re-raised as it was once the partial folder is gone.
    """
    existed = os.path.exists(folder)
    try:
        yield
    except BaseException as error:
        complete = os.path.exists(os.path.join(folder, TRAINER_STATE_NAME))
        remove = not existed and not complete and writes
        failure = None
        if isinstance(error, WRITE_ERRORS) and not isinstance(error, SaveError):  # free space measured first
            what = f"checkpoint {folder}" + (" (the partial folder was removed)" if remove else "")
            failure = save_error(what, folder, error)
        if remove:
            shutil.rmtree(folder, ignore_errors=True)
        if failure is not None:
            raise failure from error
        raise


def missing_keys_after_load(model: torch.nn.Module, missing_keys: Sequence[str]) -> list[str]:
    """``missing_keys`` less the tied parameters that really are the same tensor as a parameter that was loaded.

    A tied parameter (`lm_head.weight` sharing `model.embed_tokens.weight`) is saved once, so loading a checkpoint
    reports it missing; Transformers' own check only knows `_keys_to_ignore_on_save`, empty for tied models since
    transformers 5, and would warn on every resume although nothing is lost.
    """
    tied = getattr(model, "all_tied_weights_keys", None) or {}
    parameters = dict(model.named_parameters(remove_duplicate=False))
    missing = set(missing_keys)

    def restored_by_tie(key: str) -> bool:
        source = tied.get(key)
        return (
            source is not None
            and source not in missing
            and key in parameters
            and parameters[key] is parameters.get(source)
        )

    return [key for key in missing_keys if not restored_by_tie(key)]
