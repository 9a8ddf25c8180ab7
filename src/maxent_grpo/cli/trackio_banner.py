"""trackio's end-of-run banner, told the way it is: a local run's logs stay on this machine.

trackio ends a local run (no Space configured) by printing "Uploading logs to Trackio (please wait...)" while it
writes the last buffered values into its local database, which reads as if the logs left the machine. The stream
below rewrites that one line; trackio prints it only for local runs.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

TRACKIO_UPLOAD_LINE = "Uploading logs to Trackio (please wait...)"
LOCAL_LINE = "Writing the last logs to trackio's local database (they stay on this machine)..."


class _LocalBanner:
    """A text stream that writes to ``stream`` with trackio's upload line rewritten; everything else is its."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(text.replace(TRACKIO_UPLOAD_LINE, LOCAL_LINE))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def say_local_trackio_logs_stay_local() -> None:
    """Wrap ``sys.stdout`` so that trackio's end-of-run line says the logs stay local."""
    if sys.stdout is not None and not isinstance(sys.stdout, _LocalBanner):
        sys.stdout = _LocalBanner(sys.stdout)
