"""One HTTP exchange that ends by a deadline, however slowly the server answers.

`requests`' ``timeout`` bounds the connection and each wait for the next bytes, not the exchange: a server that
trickles its answer a few bytes at a time, headers or body, keeps a request alive indefinitely. In `exchange`
connecting is bounded by the time left when the request is sent; the headers are read under a watchdog that shuts the
connection's socket at the deadline (a session must mount `DeadlineAdapter` for it); the body is then read piece by
piece as it arrives, each read narrowing the socket's timeout to the time left. A slow answer is so cut off at the
deadline and its connection closed (not returned to the pool, where a half-read answer would poison the next request).
`DeadlineAdapter.cut_off_all` also cuts off, at once, every exchange of its session in flight (training that stops
does not wait for a request of its own to end).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

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

# The deadline of the exchange this thread is in (read by the connection while it waits for the headers).
_current = threading.local()


class _InFlight:
    """The sockets of one session's exchanges in flight, to cut them off together."""

    def __init__(self) -> None:
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()

    def add(self, sock: socket.socket | None) -> None:
        if sock is not None:
            with self._lock:
                self._sockets.add(sock)

    def discard(self, sock: socket.socket | None) -> None:
        with self._lock:
            self._sockets.discard(sock)  # type: ignore[arg-type]

    def cut_off_all(self) -> None:
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            with suppress(OSError):  # closed meanwhile
                sock.shutdown(socket.SHUT_RDWR)


class _HeadersByDeadline:
    """Mixed into urllib3's connections: waiting for an answer's headers ends at the exchange's deadline."""

    sock: socket.socket | None

    def getresponse(self) -> Any:
        deadline = getattr(_current, "deadline", None)
        if deadline is None:
            return super().getresponse()  # type: ignore[misc]
        watchdog = threading.Timer(max(deadline - time.monotonic(), 0.0), self._cut_off)
        watchdog.daemon = True
        watchdog.start()
        in_flight: _InFlight | None = getattr(_current, "in_flight", None)
        sock = self.sock
        if in_flight is not None:
            in_flight.add(sock)
        try:
            return super().getresponse()  # type: ignore[misc]
        finally:
            watchdog.cancel()
            if in_flight is not None:
                in_flight.discard(sock)

    def _cut_off(self) -> None:
        sock = self.sock
        if sock is not None:
            with suppress(OSError):  # closed meanwhile
                sock.shutdown(socket.SHUT_RDWR)


class _Connection(_HeadersByDeadline, HTTPConnection):
    pass


class _SecureConnection(_HeadersByDeadline, HTTPSConnection):
    pass


class _Pool(HTTPConnectionPool):
    ConnectionCls = _Connection


class _SecurePool(HTTPSConnectionPool):
    ConnectionCls = _SecureConnection


class DeadlineAdapter(HTTPAdapter):
    """`requests`' adapter whose connections bound the wait for an answer's headers by `exchange`'s deadline."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.in_flight = _InFlight()
        super().__init__(*args, **kwargs)

    def cut_off_all(self) -> None:
        """Cut off every exchange in flight through this adapter (each raises one of `TRANSIENT_ERRORS`)."""
        self.in_flight.cut_off_all()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _Pool, "https": _SecurePool}


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
    adapter = session.get_adapter(url)
    in_flight = adapter.in_flight if isinstance(adapter, DeadlineAdapter) else None
    _current.deadline, _current.in_flight = deadline, in_flight
    try:
        response = session.request(method, url, json=payload, timeout=(wait, wait), stream=True)
    except TRANSIENT_ERRORS as error:
        if time.monotonic() >= deadline:  # the watchdog cut a trickle of headers off
            raise requests.Timeout("the answer's headers were not complete by the request's deadline") from error
        raise
    finally:
        _current.deadline, _current.in_flight = None, None
    connection = response.raw.connection
    sock = None if connection is None else connection.sock
    if in_flight is not None:
        in_flight.add(sock)
    complete = False
    try:
        body = _read_body(response.raw, deadline)
        complete = True
    finally:
        if in_flight is not None:
            in_flight.discard(sock)
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
