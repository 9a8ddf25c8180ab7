"""Where a model or data set name points, checked before anything is loaded: a local path, or the Hugging Face Hub.

A name that can only be a path (``./x``, ``/x``, ``~/x``, or a file name such as ``maths.jsonl``: Hub ids have no
file extension) and does not exist is reported as "no such file or directory" instead of a Hub error about repo id
characters. For a Hub name the Hub is probed once, with one short request: `huggingface_hub` retries an unreachable
Hub with back-off (about 30 s per file) before it gives up, and a run that cannot reach the Hub should say so at once.
"""

from __future__ import annotations

import functools
from pathlib import Path

import requests
from huggingface_hub import constants, is_offline_mode, try_to_load_from_cache
from huggingface_hub.utils import HFValidationError, validate_repo_id

from maxent_grpo.cli.usage_error import UsageError

PROBE_TIMEOUT_SECONDS = 5.0

# Suffixes that make a name a file name rather than a Hub id (model and data set files users pass by mistake).
_FILE_SUFFIXES = frozenset(
    {".json", ".jsonl", ".csv", ".tsv", ".parquet", ".txt", ".arrow", ".yaml", ".yml", ".safetensors", ".bin", ".pt"}
)


def looks_local(name: str) -> bool:
    """Whether ``name`` can only mean a local path: it starts with ``.``, ``/`` or ``~``, or has a file extension."""
    return name.startswith((".", "/", "~")) or Path(name).suffix.lower() in _FILE_SUFFIXES


@functools.cache
def hub_unreachable_reason() -> str | None:
    """Why the Hub cannot be asked (offline mode, or a failed probe of its endpoint), or None when it answers."""
    if is_offline_mode():
        return "offline mode is on (HF_HUB_OFFLINE)"
    try:
        requests.head(constants.ENDPOINT, timeout=PROBE_TIMEOUT_SECONDS)
    except requests.RequestException as error:
        return f"{constants.ENDPOINT} is unreachable ({type(error).__name__})"
    return None


def check_source(name: str, kind: str, *, cached_file: str | None = None) -> None:
    """Stop with one line when ``name`` is neither an existing local path nor something the Hub can be asked for.

    Args:
        name: a local path or a Hub id.
        kind: "model", "dataset", "reward model": named in the message.
        cached_file: a file whose presence in the local Hub cache makes the name usable offline (``config.json``
            for models); None when the loader checks its own cache (data sets).

    Raises:
        UsageError: a local-looking path that does not exist; a Hub name while the Hub is unreachable and the name
            is not cached (offline mode), or unreachable without offline mode (which would retry for half a minute).
    """
    if Path(name).expanduser().exists():
        return
    if looks_local(name):
        raise UsageError(f"cannot load {kind} {name!r}: no such file or directory")
    try:
        validate_repo_id(name)
    except HFValidationError as error:
        raise UsageError(
            f"cannot load {kind} {name!r}: no such file or directory, nor a valid Hub id ({error})"
        ) from error
    reason = hub_unreachable_reason()
    if reason is None:
        return
    if is_offline_mode():
        if cached_file is None or isinstance(try_to_load_from_cache(name, cached_file), str):
            return
        raise UsageError(
            f"cannot load {kind} {name!r}: no local file or directory of that name, and it is not in the Hub cache; "
            f"{reason}"
        )
    raise UsageError(
        f"cannot load {kind} {name!r}: no local file or directory of that name, and the Hugging Face Hub cannot be "
        f"asked: {reason}; set HF_HUB_OFFLINE=1 to use the local Hub cache"
    )


def check_model_source(name: str, kind: str = "model") -> None:
    """`check_source` for a model: besides, a local folder must hold the ``config.json`` of `save_pretrained`."""
    check_source(name, kind, cached_file="config.json")
    path = Path(name).expanduser()
    if path.is_file():
        raise UsageError(f"cannot load {kind} {name!r}: it is a file; expected a folder saved with save_pretrained")
    if path.is_dir() and not (path / "config.json").is_file():
        raise UsageError(
            f"cannot load {kind} {name!r}: the folder holds no config.json (expected a model saved with "
            "save_pretrained)"
        )
