"""Checks of a `maxent-grpo train` run that need the config together with the data or the machine.

Each one stops the command, before any training step, on a run that could only fail later (after the model has
loaded, or at the first save) or never make progress.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch
from transformers import PreTrainedModel
from transformers.integrations import get_available_reporting_integrations

from maxent_grpo.cli.usage_error import UsageError
from maxent_grpo.config import MaxEntGRPOConfig

_GIB = 1024**3


def check_output_dir(output_dir: str) -> None:
    """``output_dir`` is (or can be made) a folder this process can write a file in."""
    path = Path(output_dir).expanduser()
    if path.exists() and not path.is_dir():
        raise UsageError(f"output_dir {output_dir!r} is a file; expected a folder (created when missing)")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as error:
        raise UsageError(f"cannot write to output_dir {output_dir!r}: {error.strerror or error}") from error


def check_report_to(config: MaxEntGRPOConfig) -> None:
    """Every integration in ``report_to`` is installed (transformers raises only when it builds the callback)."""
    available = set(get_available_reporting_integrations())
    for name in config.report_to or []:
        if name not in ("none", "all") and name not in available:
            raise UsageError(
                f"report_to={name!r} needs the {name} package, which is not installed: pip install {name}, or report "
                f"to one of {sorted(available) or ['none']}"
            )


def check_batch_fits_dataset(config: MaxEntGRPOConfig, num_prompts: int) -> None:
    """One generation batch draws ``generation_batch_size / num_generations`` distinct prompts from the data set.

    TRL's `RepeatSampler` drops a batch it cannot fill, so a data set with fewer prompts than that yields no batch
    at all: the run would sit at step 0.
    """
    needed = config.generation_batch_size // config.num_generations
    if needed > num_prompts:
        terms, fields_to_change = config.generation_batch_terms()
        raise UsageError(
            f"one generation batch needs {needed} distinct prompts ({terms} completions in groups of "
            f"num_generations ({config.num_generations})), but the dataset has {num_prompts}; lower "
            f"{' or '.join(fields_to_change)}, or use more prompts"
        )


def check_logits_fit(config: MaxEntGRPOConfig, model: PreTrainedModel, device: torch.device) -> None:
    """The logits of one training micro-batch alone must fit in the memory of the device that trains.

    TRL computes the completion logits of ``per_device_train_batch_size`` rows at once, a
    ``[batch, max_completion_length, vocabulary]`` tensor in the model's dtype, so its size is a lower bound on
    what a step needs. A run above it cannot train on this machine however it is scheduled, and would otherwise
    first spend the whole generation of its first batch before running out of memory.
    """
    vocab_size = model.config.get_text_config().vocab_size
    element_size = next(model.parameters()).element_size()
    needed = config.per_device_train_batch_size * config.max_completion_length * vocab_size * element_size
    available = _device_memory(device)
    if needed > available:
        raise UsageError(
            f"the logits of one micro-batch need {needed / _GIB:.1f} GiB (per_device_train_batch_size "
            f"{config.per_device_train_batch_size} x max_completion_length {config.max_completion_length} x "
            f"vocabulary {vocab_size} x {element_size} bytes), more than the {available / _GIB:.1f} GiB of memory of "
            f"{device.type}; lower per_device_train_batch_size or max_completion_length"
        )


def _device_memory(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
