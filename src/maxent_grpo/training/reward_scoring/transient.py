"""Which errors of a reward function call are worth another attempt.

A scorer behind a network fails in ways that a second attempt may not: the connection was refused or reset, the call
timed out, the server answered 408 (request timeout), 429 (too many requests) or a 5xx. Anything else (a `TypeError`
in the function, a 400 or 404 from the server) fails the same way every time, so retrying only delays the error.

The request errors of ``requests``, ``httpx`` and ``aiohttp`` are recognised when those packages are loaded (a
function that raised one of them has imported its package): none of them is imported here.
"""

from __future__ import annotations

import sys
import urllib.error

#: HTTP statuses that say "try again later".
TRANSIENT_STATUSES = frozenset({408, 429})


def http_status(error: BaseException) -> int | None:
    """The HTTP status an error carries, or None: ``requests`` / ``httpx`` (``error.response.status_code``),
    ``aiohttp`` (``error.status``) and ``urllib`` (`urllib.error.HTTPError`)."""
    if isinstance(error, urllib.error.HTTPError):
        return error.code
    for candidate in (getattr(getattr(error, "response", None), "status_code", None), getattr(error, "status", None)):
        if isinstance(candidate, int) and not isinstance(candidate, bool):
            return candidate
    return None


def _request_errors() -> tuple[type[BaseException], ...]:
    """The base classes of the request errors of the HTTP clients loaded in this process."""
    errors: list[type[BaseException]] = []
    if (requests := sys.modules.get("requests")) is not None:
        errors.append(requests.RequestException)
    if (httpx := sys.modules.get("httpx")) is not None:
        errors.extend((httpx.TransportError, httpx.HTTPStatusError))
    if (aiohttp := sys.modules.get("aiohttp")) is not None:
        errors.append(aiohttp.ClientError)
    return tuple(errors)


def is_transient(error: BaseException) -> bool:
    """Whether a call that raised ``error`` may succeed if made again.

    An error carrying an HTTP status is transient exactly when the status is 408, 429 or 5xx. Without one: a timeout,
    `ConnectionError`, any `OSError` and the request errors of ``requests``, ``httpx`` and ``aiohttp``.
    """
    status = http_status(error)
    if status is not None:
        return status in TRANSIENT_STATUSES or 500 <= status < 600
    return isinstance(error, (TimeoutError, OSError, *_request_errors()))


def is_timeout(error: BaseException) -> bool:
    """Whether ``error`` says a call took too long: `TimeoutError` (``reward_timeout``, asyncio, sockets) or the
    timeout errors of ``requests`` and ``httpx`` when those are loaded."""
    timeouts: list[type[BaseException]] = [TimeoutError]
    if (requests := sys.modules.get("requests")) is not None:
        timeouts.append(requests.Timeout)
    if (httpx := sys.modules.get("httpx")) is not None:
        timeouts.append(httpx.TimeoutException)
    return isinstance(error, tuple(timeouts))
