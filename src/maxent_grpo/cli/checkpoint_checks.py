"""The files of the checkpoint `maxent-grpo train` resumes from, checked before the model loads.

The Trainer reads a checkpoint only once training starts, and a corrupt file then ends in a traceback from json,
safetensors or torch, while a missing optimizer or scheduler file silently starts them afresh. Here every file the
resume reads must be there and parse (JSON files in full; weights and torch archives by their headers), and a
checkpoint without the MaxEnt controller state, which the run would resume with reset controllers, is a warning
naming what is reset.
"""

from __future__ import annotations

import json
import logging
import zipfile
from pathlib import Path

from safetensors import SafetensorError, safe_open
from transformers.trainer import OPTIMIZER_NAME, SCHEDULER_NAME, TRAINER_STATE_NAME

from maxent_grpo.cli.usage_error import UsageError
from maxent_grpo.config import MaxEntGRPOConfig
from maxent_grpo.training.checkpoints.extra_state import CONTROLLER_STATE_FILE
from maxent_grpo.training.dynamic_sampling import DynamicSampler

logger = logging.getLogger(__name__)

_WEIGHTS = ("model.safetensors", "adapter_model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


def check_checkpoint(checkpoint: str, config: MaxEntGRPOConfig) -> None:
    """Raise `UsageError` naming the first missing or corrupt file of ``checkpoint``; warn when the controller state
    the run needs is not in it."""
    folder = Path(checkpoint)
    required = [TRAINER_STATE_NAME]
    if not config.deepspeed and not config.fsdp:  # those engines keep the optimizer in their own folders
        required += [OPTIMIZER_NAME, SCHEDULER_NAME]
    for name in required:
        if not (folder / name).is_file():
            raise UsageError(f"cannot resume from {checkpoint!r}: its {name} is missing")
    if not any((folder / name).is_file() for name in _WEIGHTS):
        raise UsageError(
            f"cannot resume from {checkpoint!r}: it holds no model weights (none of {', '.join(_WEIGHTS)})"
        )
    for path in sorted(folder.iterdir()):
        reason = _corruption(path)
        if reason is not None:
            raise UsageError(f"cannot resume from {checkpoint!r}: its {path.name} is corrupt ({reason})")
    _warn_about_reset_state(folder, config)


def _corruption(path: Path) -> str | None:
    """Why ``path`` cannot be read as what its name says, or None (also for files of other kinds)."""
    if not path.is_file():
        return None
    if path.suffix == ".json":
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError:
            return "not UTF-8 text"
        except ValueError as error:
            return f"not JSON: {error}"
    elif path.suffix == ".safetensors":
        try:
            with safe_open(str(path), framework="pt") as weights:
                weights.keys()
        except SafetensorError as error:
            return str(error)
    elif path.suffix in (".pt", ".pth", ".bin") and not zipfile.is_zipfile(path):
        return "not a torch.save archive"
    return None


def _warn_about_reset_state(folder: Path, config: MaxEntGRPOConfig) -> None:
    state_path = folder / CONTROLLER_STATE_FILE
    state = json.loads(state_path.read_text(encoding="utf-8")) if state_path.is_file() else {}
    reset = []
    if config.maxent_objective == "listwise" and "tau" not in state:
        reset.append(f"tau controller (tau back to maxent_tau={config.maxent_tau})")
        reset.append(f"beta controller (beta back to {config.beta})")
    if config.dynamic_sampling and DynamicSampler.checkpoint_key not in state:
        reset.append("dynamic sampler")
    if reset:
        logger.warning(
            "Checkpoint %s holds no %s with this state: resuming with the %s reset.",
            folder,
            CONTROLLER_STATE_FILE,
            " and the ".join(reset),
        )
