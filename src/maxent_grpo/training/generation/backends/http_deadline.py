"""One HTTP exchange that ends by a deadline, however slowly the server answers.

`requests`' ``timeout`` bounds the connection and each wait for the next bytes, not the exchange: a server that
trickles its answer a few bytes at a time keeps a request alive indefinitely. In `exchange` connecting and the wait
for the answer's headers are each bounded by the time left when the request is sent; the body is then read piece by
piece as it arrives, each read narrowing the socket's timeout to the time left, so a slow answer is cut off at the
deadline and its connection closed (not returned to the pool, where a half-read answer would poison the next request).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import requests
import urllib3

# Exceptions raised when the server could not be reached, the exchange broke off or ran out of time, or the body
# arrived in a form that cannot be decoded (a corrupt content encoding, damaged on its way): worth retrying.
TRANSIENT_ERRORS = (
    requests.ConnectionError,
    requests.Timeout,
    requests.exceptions.ChunkedEncodingError,
    requests.exceptions.ContentDecodingError,
    urllib3.exceptions.ReadTimeoutError,
    urllib3.exceptions.ProtocolError,
    urllib3.exceptions.DecodeError,
)

_READ_BYTES = 1 << 16


@dataclass(frozen=True)
class Answer:
    """A complete HTTP answer.

    Attributes:
        status: the HTTP status code.
        body: the whole body, as received (content encoding undone).
    """

    status: int
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON; raises ValueError when it is not JSON."""
        return json.loads(self.body)

    def text(self, limit: int) -> str:
        """The first ``limit`` bytes of the body as text, for messages."""
        return self.body[:limit].decode("utf-8", errors="replace")


def exchange(
    session: requests.Session, method: str, url: str, payload: dict[str, Any] | None, deadline: float
) -> Answer:
    """Send one request and read its whole answer by ``deadline`` (a `time.monotonic` instant).

    Raises one of `TRANSIENT_ERRORS` when the server cannot be reached, the exchange breaks off, the body cannot be
    decoded (`urllib3.exceptions.DecodeError`), or the answer is not complete by the deadline (`requests.Timeout`).
    """
    wait = _time_left(deadline)
    response = session.request(method, url, json=payload, timeout=(wait, wait), stream=True)
    complete = False
    try:
        body = _read_body(response.raw, deadline)
        complete = True
    finally:
        if not complete:
            response.close()  # a half-read connection cannot be reused: drop it
    return Answer(response.status_code, body)


def _time_left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise requests.Timeout("the answer was not complete by the request's deadline")
    return left


def _read_body(raw: urllib3.HTTPResponse, deadline: float) -> bytes:
    """Read ``raw`` to its end, each read waiting at most the time left before ``deadline``."""
    chunks = []
    while True:
        left = _time_left(deadline)
        connection = raw.connection  # None once the body is complete and the connection back in the pool
        if connection is not None and connection.sock is not None:
            connection.sock.settimeout(left)
        chunk = raw.read1(_READ_BYTES, decode_content=True)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
