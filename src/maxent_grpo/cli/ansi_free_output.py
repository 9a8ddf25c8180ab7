"""Output for a log file: no ANSI colour codes when stdout / stderr is not a terminal.

trackio prints its banner with colour codes whatever the stream, and a log file keeps them as raw escape sequences;
`strip_ansi_when_redirected` filters them out of streams that are not terminals.
"""

from __future__ import annotations

import re
import sys
from typing import Any, TextIO

_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class _AnsiStripping:
    """A text stream that writes to ``stream`` without ANSI escape sequences; everything else is ``stream``'s."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(_ANSI_ESCAPE.sub("", text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def strip_ansi_when_redirected() -> None:
    """Replace ``sys.stdout`` / ``sys.stderr`` by ANSI-stripping wrappers when they are not terminals."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not stream.isatty() and not isinstance(stream, _AnsiStripping):
            setattr(sys, name, _AnsiStripping(stream))
