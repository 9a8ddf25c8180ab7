"""Failures to write a model or checkpoint (full disk, quota, file size limit, a folder that became read-only).

The writers report them in three shapes: `OSError` (JSON, tokenizer files), `RuntimeError` from torch's zip writer
(optimizer, RNG state) and `SafetensorError` (weights). `SaveError` is the one the trainer and the command line
raise instead, naming what was being saved and the writer's reason.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from safetensors import SafetensorError

WRITE_ERRORS: tuple[type[Exception], ...] = (OSError, RuntimeError, SafetensorError)


class SaveError(OSError):
    """Saving a model or checkpoint failed; the message names the target and the writer's reason."""


def save_error(target: str, folder: str, error: Exception) -> SaveError:
    """A `SaveError` for ``target``, written into ``folder``, from a writer's exception (chain it with ``from``).

    The message ends with the free space of ``folder``'s file system: torch's writer reports a full disk only as
    "unexpected pos", and a quota or size limit looks the same.
    """
    if isinstance(error, OSError) and error.strerror:
        reason = error.strerror + (f": {error.filename}" if error.filename else "")
    else:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return SaveError(f"cannot save {target}: {reason} ({_free_space(Path(folder))} free on its file system)")


def _free_space(folder: Path) -> str:
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if free >= size:
            return f"{free / size:.1f} {unit}"
    return f"{free} bytes"
