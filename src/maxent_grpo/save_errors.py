"""Failures to write a model or checkpoint (full disk, quota, file size limit, a folder that became read-only).

The writers report them in three shapes: `OSError` (JSON, tokenizer files), `RuntimeError` from torch's zip writer
(optimizer, RNG state) and `SafetensorError` (weights). `SaveError` is the one the trainer and the command line
raise instead, naming what was being saved and the writer's reason.
"""

from __future__ import annotations

from safetensors import SafetensorError

WRITE_ERRORS: tuple[type[Exception], ...] = (OSError, RuntimeError, SafetensorError)


class SaveError(OSError):
    """Saving a model or checkpoint failed; the message names the target and the writer's reason."""


def save_error(target: str, error: Exception) -> SaveError:
    """A `SaveError` for ``target`` from a writer's exception (chain it with ``raise ... from error``)."""
    if isinstance(error, OSError) and error.strerror:
        reason = error.strerror + (f": {error.filename}" if error.filename else "")
    else:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return SaveError(f"cannot save {target}: {reason}")
