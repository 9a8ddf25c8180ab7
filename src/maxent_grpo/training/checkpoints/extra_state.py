"""What a checkpoint holds beyond the Trainer's own files, and how a checkpoint save never leaves a false checkpoint.

- The controller state file (`CONTROLLER_STATE_FILE`): the listwise controllers' state at its top level, the dynamic
  sampler's under its own key. It is written before the Trainer's files, so a checkpoint with `trainer_state.json`
  (written last, after which the Trainer deletes checkpoints beyond `save_total_limit`) always has it.
- `saving_checkpoint`: a checkpoint folder the save could not complete is removed, so that a partial checkpoint never
  looks like one to resume from, and a checkpoint saved again (a resumed run reaching a step an earlier run saved)
  replaces the earlier one whole or not at all; a complete one is kept.
- `missing_keys_after_load`: the keys a loaded checkpoint really lacks, less the tied weights it rightly leaves out.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from maxent_grpo.training.checkpoints.resume import is_complete
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
def saving_checkpoint(folder: str, *, writes: bool, barrier: Callable[[], None]) -> Iterator[None]:
    """Save a checkpoint into ``folder`` inside this block, so that a failed save leaves no false checkpoint.

    A ``folder`` that already exists (a run resumed from an earlier checkpoint saving a step that the earlier run saved
    too) is first moved aside, to ``_replaced-<name>`` beside it (a name nothing resumes from, rotates or uploads to
    the Hub), so the save never writes new files beside old ones. If the save fails before the checkpoint is complete
    (`trainer_state.json`, written last), the partial folder is removed and the earlier checkpoint put back as it was;
    once it succeeds on every process, the earlier one is deleted. Complete means `resume.is_complete`: a
    `trainer_state.json` that is whole JSON, so a Ctrl-C or a full disk while it is written removes the folder too. A
    save killed mid-way (SIGKILL, preemption) leaves the earlier checkpoint aside; the next save of that step puts it
    back before anything else. Only the process that writes (``writes``, `TrainingArguments.should_save`) moves and
    removes folders; ``barrier`` (every process calls this together) keeps the others from writing into ``folder``
    before it is moved aside.

    A write failure (full disk, quota) is raised as one `SaveError` naming the checkpoint; anything else,
    KeyboardInterrupt included, is re-raised as it was once the partial folder is gone.
    """
    aside = os.path.join(os.path.dirname(folder), f"_replaced-{os.path.basename(folder)}")
    if writes and os.path.isdir(aside):  # a save killed mid-way: the complete checkpoint it was replacing wins
        if is_complete(Path(folder)):
            shutil.rmtree(aside)
        else:
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(aside, folder)
    replaces = writes and os.path.isdir(folder)
    if replaces:
        os.replace(folder, aside)
    barrier()
    try:
        yield
    except BaseException as error:
        remove = writes and not is_complete(Path(folder))
        failure = None
        if isinstance(error, WRITE_ERRORS) and not isinstance(error, SaveError):  # free space measured first
            undone = " (the partial folder was removed" + (", the earlier checkpoint put back)" if replaces else ")")
            failure = save_error(f"checkpoint {folder}" + (undone if remove else ""), folder, error)
        if remove:
            shutil.rmtree(folder, ignore_errors=True)
            if replaces:
                os.replace(aside, folder)
        elif replaces:  # the new checkpoint is complete: it stands
            shutil.rmtree(aside, ignore_errors=True)
        if failure is not None:
            raise failure from error
        raise
    barrier()  # every process has written its part of the new checkpoint
    if replaces:
        shutil.rmtree(aside, ignore_errors=True)


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
