"""The command line's name for the embedded real model: ``smollm2`` resolves to its folder, built once."""

from __future__ import annotations

from pathlib import Path

from maxent_grpo.cli.usage_error import UsageError
from maxent_grpo.smollm2 import SMOLLM2, ModelBuildError, smollm2_dir


def resolve_smollm2() -> Path:
    """The folder of the embedded real model `SMOLLM2` (built once into the cache: `maxent_grpo.smollm2`).

    Raises:
        UsageError: it cannot be built (``gguf`` missing, the wheel out of reach, a full disk), in one line.
    """
    try:
        return smollm2_dir()
    except ModelBuildError as error:
        raise UsageError(f"model {SMOLLM2!r}: {error}") from error
