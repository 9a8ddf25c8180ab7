"""A local data file is checked before `datasets` reads it, and its read errors become one sentence.

`datasets` reports an empty JSON Lines file as a bare `StopIteration`, and a malformed or non-UTF-8 one as a
`DatasetGenerationError` after three chained tracebacks (or, for bytes that are not UTF-8, a `UnicodeDecodeError`
only when a row is read): these checks name the file and the line instead.
"""

from __future__ import annotations

import codecs
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from datasets.exceptions import DatasetGenerationError
from pyarrow import ArrowException

from maxent_grpo.cli.usage_error import UsageError

_TEXT_SUFFIXES = frozenset({".json", ".jsonl", ".csv", ".txt"})
_DATA_SUFFIXES = _TEXT_SUFFIXES | {".parquet"}
_CHUNK_BYTES = 1 << 20


def check_data_file(name: str) -> None:
    """A local data file must not be empty, and a text one (JSON, JSON Lines, CSV, text) must be UTF-8; a local
    directory's data files are checked one by one."""
    path = Path(name).expanduser()
    if path.is_dir():
        for member in sorted(path.rglob("*")):
            if member.is_file() and member.suffix.lower() in _DATA_SUFFIXES and not member.name.startswith("."):
                check_data_file(str(member))
        return
    if not path.is_file():
        return
    if path.suffix.lower() not in _TEXT_SUFFIXES:
        if path.stat().st_size == 0:
            raise UsageError(f"dataset file {name!r} is empty")
        return
    decoder = codecs.getincrementaldecoder("utf-8")()
    line, blank = 1, True
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK_BYTES), b""):
            try:
                text = decoder.decode(chunk)
            except UnicodeDecodeError as error:
                offset = max(error.start - (len(error.object) - len(chunk)), 0)  # the decoder may hold earlier bytes
                line += chunk[:offset].count(b"\n")
                bad = error.object[error.start : error.start + 1]
                raise UsageError(
                    f"dataset file {name!r} is not UTF-8 text: line {line} holds the byte 0x{bad.hex()}; save it "
                    "as UTF-8"
                ) from error
            line += chunk.count(b"\n")
            blank = blank and not text.strip()
    if blank:
        raise UsageError(f"dataset file {name!r} is empty")


def _below_error(record: logging.LogRecord) -> bool:
    return record.levelno < logging.ERROR


@contextmanager
def dataset_read_errors(name: str) -> Iterator[None]:
    """Turn `datasets`' `DatasetGenerationError` (a row it cannot parse), and the parse and decode errors a streamed
    data set raises as they are, into a `UsageError` naming the cause.

    `datasets` also logs each such error just before raising it; those records are dropped while loading, since the
    `UsageError` says the same in one line.
    """
    handlers = logging.getLogger("datasets").handlers
    for handler in handlers:
        handler.addFilter(_below_error)
    try:
        yield
    except DatasetGenerationError as error:
        cause = error.__cause__ or error
        raise UsageError(f"cannot read dataset {name!r}: {type(cause).__name__}: {cause}") from error
    except (ArrowException, UnicodeDecodeError) as error:  # raised as they are while a streamed data set is read
        raise UsageError(f"cannot read dataset {name!r}: {type(error).__name__}: {error}") from error
    finally:
        for handler in handlers:
            handler.removeFilter(_below_error)
