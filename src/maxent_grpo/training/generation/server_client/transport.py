"""HTTP to one vLLM server: connecting (``GET /health``, ``GET /v1/models``) and requests retried with backoff.

`ServerTransport` owns the HTTP session (every exchange ends by a deadline, see `http_deadline`) and the retry
policy: connection errors, timeouts, bodies that cannot be decoded, HTTP 5xx, 408 and 429 are tried again with
jittered exponential backoff up to ``max_attempts`` times, each try bounded by ``request_timeout`` and by the
generation step's deadline (`ServerTransport.deadline`). A 4xx that no prompt can cause raises
`VLLMServerRequestError` at once; any other 4xx answer to a completion request is returned to the caller, who treats
it as the server rejecting that request's prompt.

A server pool can *abandon* a server's call (`ServerTransport.abandon`: its groups went to another server): its
exchanges in flight are cut off and nothing more is sent, counted neither as a failure nor as out of time.

`HealthWait` is the wait for a server to come up (``GET /health``), shared with the client TRL builds in server
mode (`server_client.trl_client`): one warning when the server is found down, one ``still waiting`` line every
`STILL_WAITING_EVERY` seconds, and after ``vllm_server_timeout`` seconds one `VLLMServerUnavailableError` naming the
address and that field.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import requests
import urllib3

from maxent_grpo.serving import routes
from maxent_grpo.training.generation.contract.protocol import GenerationStopped
from maxent_grpo.training.generation.server_client.http_deadline import (
    TRANSIENT_ERRORS,
    Answer,
    DeadlineAdapter,
    exchange,
)

#: The endpoint completions are asked from.
COMPLETIONS_PATH = routes.COMPLETIONS

# HTTP statuses worth retrying besides 5xx; and the 4xx of a completion request that no prompt can cause.
_TRANSIENT_STATUSES = frozenset({408, 429})
_CONFIGURATION_STATUSES = frozenset({401, 403, 404})

_HEALTH_POLL_SECONDS = 1.0

#: Seconds between the ``still waiting`` lines while a server is waited for (see `HealthWait`).
STILL_WAITING_EVERY = 30.0

#: The config field that sets how long a server has to come up (TRL's client waits that long, and the built-in
#: server backend gets it as its ``connection_timeout``).
SERVER_TIMEOUT_FIELD = "vllm_server_timeout"

#: How `ServerTransport` names its wait's setting: a backend of the user's own is given ``connection_timeout``.
BACKEND_TIMEOUT_SETTING = f"connection_timeout; {SERVER_TIMEOUT_FIELD} for the trainer's built-in backend"

#: ``count(stat, amount)``: adds ``amount`` to the owner's counter ``stat``.
StatCounter = Callable[[str, int], None]


class VLLMServerRequestError(RuntimeError):
    """The server rejected a request with an HTTP 4xx that concerns the configuration, not a prompt.

    That is 401, 403 or 404 on ``POST /v1/completions`` (credentials, or a model name the server does not serve) and
    any 4xx on ``GET /v1/models``. Never retried: every request would get it.

    Attributes:
        status_code: the HTTP status the server answered with.
    """

    def __init__(self, method: str, url: str, status_code: int, detail: str) -> None:
        super().__init__(
            f"vLLM server rejected {method} {url} with HTTP {status_code}: {detail}. This is a configuration error "
            "(for example a wrong model name or missing credentials) and is not retried."
        )
        self.status_code = status_code


class VLLMServerUnavailableError(GenerationStopped, ConnectionError):
    """The server has not come up within ``connection_timeout`` seconds (the config's ``vllm_server_timeout``).

    A `GenerationStopped`: raised by a backend's ``generate``, it stops training at once with this message instead of
    counting as one failed call to retry (every retry would wait for the same absent server). It is also a
    `ConnectionError`, which TRL's server client raises in its place.

    Args:
        base_url: the server's address.
        connection_timeout: the seconds it had to come up.
        cause: why the last poll failed.
        tries: how many polls were made, or None.
        setting: what sets ``connection_timeout``, named in the message.
    """

    def __init__(
        self,
        base_url: str,
        connection_timeout: float,
        cause: str,
        tries: int | None = None,
        setting: str = SERVER_TIMEOUT_FIELD,
    ) -> None:
        polls = "" if tries is None else f"{tries} tries, the last: "
        super().__init__(
            f"the vLLM server at {base_url} has not come up within {connection_timeout:g} s ({polls}{cause}): is it "
            f"running, at this address? Start it first (maxent-grpo vllm-serve), or give it longer ({setting})"
        )


def is_timeout(exc: BaseException) -> bool:
    """Whether ``exc`` says that an exchange ran out of time (not that it was refused or broken off)."""
    return isinstance(exc, requests.Timeout | urllib3.exceptions.ReadTimeoutError) or "timed out" in str(exc)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _brief(exc: BaseException) -> str:
    """``exc`` in a few words: its type and the system's reason at the bottom of the chain requests and urllib3 wrap
    it in (``ConnectionError: Connection refused``), or `_describe`'s text when there is none."""
    pending, seen = [exc], set()
    while pending:
        cause = pending.pop()
        if id(cause) in seen:
            continue
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.strerror:
            return f"{type(exc).__name__}: {cause.strerror}"
        linked = (cause.__cause__, cause.__context__, getattr(cause, "reason", None), *cause.args)
        pending.extend(link for link in linked if isinstance(link, BaseException))
    return _describe(exc)


#: ``get(url, timeout)``: one ``GET`` with a timeout in seconds (`requests.get`'s signature).
HealthGet = Callable[..., requests.Response]


class HealthWait:
    """The wait for one server to come up: ``GET /health`` polled until it answers 200, logged in a few lines.

    The first poll that finds the server down logs one warning (the address, the cause, and how long the wait may
    last); while it stays down, one ``still waiting (k tries, t s of T s)`` warning every ``report_every`` seconds,
    never one line per poll. A server that comes up after such a warning gets one info line. Polls, and the time
    they have taken, add up over every `wait` of one instance.

    Args:
        base_url: server root, e.g. ``http://host:8000``.
        timeout: the seconds the server has in all, for the messages.
        get: ``get(url, timeout=seconds)`` making one request, `requests.get` or a session's ``get``.
        log: where the waiting lines go.
        poll_timeout: seconds one poll may take at most (never beyond the end of the wait, but at least
            one poll interval).
        report_every: seconds between two ``still waiting`` warnings.
        setting: what sets ``timeout``, named in the messages.
    """

    def __init__(
        self,
        base_url: str,
        timeout: float,
        *,
        get: HealthGet,
        log: logging.Logger,
        poll_timeout: float = 10.0,
        report_every: float = STILL_WAITING_EVERY,
        setting: str = SERVER_TIMEOUT_FIELD,
    ) -> None:
        self.base_url = base_url
        self.setting = setting
        self.timeout = timeout
        self.tries = 0
        self._get = get
        self._log = log
        self._poll_timeout = poll_timeout
        self._report_every = report_every
        self._started: float | None = None
        self._reported_at: float | None = None

    def wait(self, budget: float) -> requests.Response | str:
        """Poll ``GET /health`` for at most ``budget`` seconds (at least one poll).

        Returns:
            The 200 response, or the cause of the last failed poll once ``budget`` is spent.
        """
        url = f"{self.base_url}{routes.HEALTH}"
        now = time.monotonic()
        if self._started is None:
            self._started = now
        deadline = now + budget
        while True:
            self.tries += 1
            timeout = min(self._poll_timeout, max(deadline - time.monotonic(), _HEALTH_POLL_SECONDS))
            try:
                response = self._get(url, timeout=timeout)
            except TRANSIENT_ERRORS as exc:
                cause = _brief(exc)
            else:
                if response.status_code == 200:
                    if self._reported_at is not None:
                        self._log.info(
                            "the vLLM server at %s is up (after %d tries, %.0f s)", self.base_url, self.tries,
                            self.waited(),
                        )  # fmt: skip
                    return response
                cause = f"HTTP {response.status_code}"
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return cause
            self._report(cause)
            time.sleep(min(_HEALTH_POLL_SECONDS, remaining))

    def waited(self) -> float:
        """Seconds since the first poll (0 before it)."""
        return 0.0 if self._started is None else time.monotonic() - self._started

    def error(self, cause: str) -> VLLMServerUnavailableError:
        """The error for a server that has not come up in time, ``cause`` the last poll's failure."""
        return VLLMServerUnavailableError(self.base_url, self.timeout, cause, self.tries, self.setting)

    def _report(self, cause: str) -> None:
        now = time.monotonic()
        if self._reported_at is None:
            self._log.warning(
                "waiting for the vLLM server at %s to come up (%s); giving up after %g s (%s), a line every %g s "
                "till then",
                self.base_url,
                cause,
                self.timeout,
                self.setting,
                self._report_every,
            )
        elif now - self._reported_at >= self._report_every:
            self._log.warning(
                "still waiting for the vLLM server at %s (%d tries, %.0f s of %g s): %s",
                self.base_url,
                self.tries,
                self.waited(),
                self.timeout,
                cause,
            )
        else:
            return
        self._reported_at = now


class ServerTransport:
    """The HTTP side of one vLLM server: its session, the retry policy and the wait for it to come up.

    Args:
        base_url: server root, e.g. ``http://host:8000``, without a trailing slash.
        request_timeout: seconds one try of a request may take, from connecting to the last byte of the answer.
        max_attempts: tries per request for infrastructure failures.
        backoff_seconds: base of the backoff between tries: ``backoff_seconds * 2**k``, jittered to between half and
            all of it.
        max_concurrency: most connections kept open at once (the pool size).
        connection_timeout: seconds the server has to come up, counted from the first `served_model` call.
        count: ``count(stat, amount)`` adds to the owner's counters: ``requests`` (completion requests sent, every
            try included), ``retries``, ``infrastructure_failures`` (requests given up after ``max_attempts``),
            ``timeouts`` (of those, the ones whose last try ran out its own ``request_timeout``: the server hangs),
            ``out_of_time`` and ``bad_data`` (a model list without a model id).
        log: where retries, failures and waits are logged (the owning backend's logger, so that all of one
            backend's messages come under one name).

    Attributes:
        session: the HTTP session; it mounts `DeadlineAdapter`, so exchanges in flight can be cut off.
        deadline: the generation step's deadline, a `time.monotonic` instant, or None (no bound but
            ``request_timeout``). Once passed no try starts and backoff never sleeps past it.
    """

    def __init__(
        self,
        base_url: str,
        *,
        request_timeout: float,
        max_attempts: int,
        backoff_seconds: float,
        max_concurrency: int,
        connection_timeout: float,
        count: StatCounter,
        log: logging.Logger,
    ) -> None:
        self.base_url = base_url
        self.request_timeout = request_timeout
        self.max_attempts = max_attempts
        self.backoff_seconds = backoff_seconds
        self.connection_timeout = connection_timeout
        self.deadline: float | None = None
        self._count = count
        self._log = log
        self._jitter = random.Random()
        self._model_lock = threading.Lock()
        self._model: str | None = None
        self._abandoned = threading.Event()
        self._health: HealthWait | None = None  # from the first `served_model` call on
        # `max_retries=0`: urllib3 must not retry behind our back; `send` owns the retry policy.
        self.session = requests.Session()
        adapter = DeadlineAdapter(max_retries=0, pool_maxsize=max_concurrency)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)

    def time_left(self) -> float:
        """Seconds left until `deadline` (infinite without one)."""
        return math.inf if self.deadline is None else self.deadline - time.monotonic()

    def backoff(self, attempt: int) -> None:
        """Sleep before try ``attempt + 1``: ``backoff_seconds * 2**(attempt - 1)``, jittered, never past
        `deadline`."""
        delay = self.backoff_seconds * 2 ** (attempt - 1) * self._jitter.uniform(0.5, 1.0)
        time.sleep(max(min(delay, self.time_left()), 0.0))

    @property
    def abandoned(self) -> bool:
        """Whether the call in progress was abandoned (`abandon`) and not resumed since (`resume`)."""
        return self._abandoned.is_set()

    def abandon(self) -> None:
        """Give up the call in progress: exchanges in flight are cut off, nothing more is sent, and what is left out
        is counted neither as a failure nor as out of time (another server was given its groups)."""
        self._abandoned.set()
        self.cut_off_all()

    def resume(self) -> None:
        """Send again after `abandon` (the next call)."""
        self._abandoned.clear()

    def out_of_time(self, what: str, amount: int = 1) -> None:
        """Count and log ``amount`` requests given up, or not sent, because `deadline` has passed (not counted once
        the call was abandoned)."""
        if self.abandoned:
            return
        self._count("out_of_time", amount)
        self._log.warning("out of time: %s: the generation step's time budget is spent", what)

    def send(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Answer | None:
        """Send one request, retrying infrastructure failures.

        Args:
            method: the HTTP method.
            path: the path under ``base_url``.
            payload: the JSON body; a request with one is counted in ``requests``.

        Returns:
            A 2xx/3xx answer, or the 4xx with which the server rejected a completion request's prompt; None after
            ``max_attempts`` failures, or when `deadline` has passed (counted and logged either way).

        Raises:
            VLLMServerRequestError: a 4xx that concerns the configuration.
        """
        url = f"{self.base_url}{path}"
        cause, timed_out = "not sent", False
        for attempt in range(1, self.max_attempts + 1):
            if self.abandoned:
                return None
            time_left = self.time_left()
            if attempt > 1 and time_left > 0:
                self._count("retries", 1)
                self._log.info(
                    "%s %s failed (attempt %d of %d), retrying: %s", method, url, attempt - 1, self.max_attempts, cause
                )
                self.backoff(attempt - 1)
                time_left = self.time_left()
            if time_left <= 0:
                break
            if payload is not None:  # a completion request (GET /v1/models is not counted)
                self._count("requests", 1)
            try:
                answer = exchange(
                    self.session, method, url, payload, time.monotonic() + min(self.request_timeout, time_left)
                )
            except TRANSIENT_ERRORS as exc:
                cause = _describe(exc)
                # Its own timeout, not the step's deadline nor a cut-off: the server did not answer in time.
                timed_out = is_timeout(exc) and self.time_left() > 0 and not self.abandoned
                continue
            timed_out = False
            if answer.status < 400:
                return answer
            if answer.status < 500 and answer.status not in _TRANSIENT_STATUSES:
                if path == COMPLETIONS_PATH and answer.status not in _CONFIGURATION_STATUSES:
                    return answer
                raise VLLMServerRequestError(method, url, answer.status, answer.text(500))
            cause = f"HTTP {answer.status}: {answer.text(200)}"
        if self.abandoned:
            return None
        if self.time_left() <= 0:
            self.out_of_time(f"{method} {url} given up ({cause})")
            return None
        self._count("infrastructure_failures", 1)
        if timed_out:
            self._count("timeouts", 1)
        self._log.warning(
            "infrastructure failure: %s %s failed after %d attempt(s): %s", method, url, self.max_attempts, cause
        )
        return None

    def served_model(self) -> str | None:
        """Return the served model id (``data[0].id`` of ``GET /v1/models``), connecting first if needed.

        Until the server has answered once, each call waits for ``GET /health`` to answer 200 (`HealthWait`: one
        warning, then one ``still waiting`` line every `STILL_WAITING_EVERY` seconds), all calls together for at
        most ``connection_timeout`` seconds from the first; after that a server still not up raises at once on every
        call (after one quick probe, so a server that comes up late is still picked up). A wait cut short by the
        generation step's deadline returns None instead of raising.

        Returns:
            The model id, or None (logged) when the server stopped answering or sent no model id.

        Raises:
            VLLMServerUnavailableError: the server has not come up within ``connection_timeout`` (a
                `GenerationStopped`: training stops with its message).
            VLLMServerRequestError: ``GET /v1/models`` was answered with a 4xx.
        """
        with self._model_lock:
            if self._model is not None:
                return self._model
            if self._health is None:
                self._health = HealthWait(
                    self.base_url,
                    self.connection_timeout,
                    get=self.session.get,
                    log=self._log,
                    poll_timeout=self.request_timeout,
                    setting=BACKEND_TIMEOUT_SETTING,
                )
            budget = min(max(self.connection_timeout - self._health.waited(), 0.0), max(self.time_left(), 0.0))
            health = self._health.wait(budget)
            if isinstance(health, str) and self.time_left() > 0:
                raise self._health.error(health)
            answer = self.send("GET", routes.MODELS)
            if answer is None:
                return None
            try:
                self._model = str(answer.json()["data"][0]["id"])
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                self._count("bad_data", 1)
                self._log.warning("bad data: GET %s/v1/models answered without a model id (%s)", self.base_url, exc)
                return None
            self._log.info("vLLM server at %s serves model %r", self.base_url, self._model)
            return self._model

    @property
    def known_model(self) -> str | None:
        """The model id `served_model` read, or None before it has."""
        return self._model

    def forget_model(self) -> None:
        """Read the served model id again at the next `served_model` (the server restarted, maybe with another)."""
        with self._model_lock:
            self._model = None

    def served_models(self, timeout: float) -> list[str] | None:
        """The ids ``GET /v1/models`` lists now, within ``timeout`` seconds; None when it does not answer with them."""
        try:
            answer = exchange(self.session, "GET", f"{self.base_url}{routes.MODELS}", None, time.monotonic() + timeout)
            return [str(entry["id"]) for entry in answer.json()["data"]] if answer.status == 200 else None
        except (*TRANSIENT_ERRORS, ValueError, KeyError, TypeError):
            return None

    def cut_off_all(self) -> None:
        """Cut off every exchange of the session in flight now; each ends as an infrastructure failure."""
        for adapter in {id(a): a for a in self.session.adapters.values()}.values():
            if isinstance(adapter, DeadlineAdapter):
                adapter.cut_off_all()

    def close(self) -> None:
        """Close the HTTP connections."""
        self.session.close()
