"""`VLLMServerBackend`: completions from a vLLM OpenAI-compatible server, spoken to the way TRL's `VLLMClient` does.

The server is the one ``vllm serve <model> --logprobs-mode processed_logprobs`` starts (add
``--weight-transfer-config`` so the trainer can push weights into it). This backend uses three endpoints:

- ``GET /health``: waited on before the first request, for at most ``connection_timeout`` seconds in all (a server
  that has not come up by then raises `VLLMServerUnavailableError`);
- ``GET /v1/models``: the served model id is ``data[0].id``;
- ``POST /v1/completions`` with token-id prompts, ``return_token_ids`` and ``return_tokens_as_token_ids``, so the
  server reports the exact prompt and completion ids it used and every logprob keyed as ``"token_id:<id>"``.

Unlike TRL's client it sends one request per unique prompt (``n`` = that prompt's count) concurrently, bounds each
request with a deadline (``request_timeout`` for the whole exchange, and the generation step's time budget when there
is one), owns its retry policy and keeps partial results. Failures fall in four classes, logged under this module's
logger with distinct prefixes and counted in ``VLLMServerBackend.stats``:

- ``infrastructure failure``: connection refused or dropped, timeout, HTTP 5xx, 408 (request timeout) or 429 (too many
  requests), a body that cannot be decoded (a corrupt content encoding). Retried with jittered exponential backoff up
  to ``max_attempts``; then that prompt's group comes back empty and the others are still returned.
- ``bad data``: the server answered, but with fewer choices than asked ("short group"), empty completions, token ids
  outside the tokenizer's vocabulary, malformed logprobs, or no logprobs although they were asked for. Unusable
  completions are returned with ``failed=True``. A single token whose logprob is null or NaN is not bad data: it keeps
  NaN, which TRL leaves out of its importance-sampling correction. Any other HTTP 4xx answer to a completion request
  is bad data for that request's prompt (vLLM answers 400 to a prompt longer than its ``--max-model-len``): that
  prompt's group comes back empty, logged and counted once, and the other prompts' groups are still returned; the
  prompt (its token ids) is never sent again, however often the trainer asks for it. Other bad data is not retried
  here: the trainer's retry loop asks again for whatever is missing.
- ``configuration error``: a 4xx that no prompt can cause, so every request would get it: 401, 403 or 404 on
  ``POST /v1/completions`` (credentials, or a model name the server does not serve) and any 4xx on
  ``GET /v1/models`` (asked at start-up). Raised at once as `VLLMServerRequestError`, never retried. A configuration
  error that the server reports as 400 (an invalid sampling parameter in ``generation_kwargs``, for example) cannot be
  told apart from a rejected prompt: every group then comes back empty with the server's message logged, and the
  trainer stops after ``generation_max_consecutive_empty_batches`` empty batches.
- ``out of time``: the generation step's time budget (see `VLLMServerBackend.set_deadline`) was spent: requests in
  flight are cut off, no new try starts, and their prompts' groups come back empty.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import requests
import torch
from transformers import PreTrainedTokenizerBase

from maxent_grpo.training.generation.backends.http_deadline import (
    TRANSIENT_ERRORS,
    Answer,
    DeadlineAdapter,
    exchange,
)
from maxent_grpo.training.generation.backends.prompt_encoding import encode_prompts
from maxent_grpo.training.generation.backends.protocol import Completion, TokenPrompt
from maxent_grpo.training.generation.backends.request_seeds import RequestSeeds
from maxent_grpo.training.generation.backends.sampling import SamplingSettings, check_int, check_number
from maxent_grpo.training.generation.backends.server_weight_sync import ServerWeightSync, WeightSource, parameters
from maxent_grpo.training.generation.backends.weight_directory import WeightDirectory

logger = logging.getLogger(__name__)

# Request fields the backend sets itself: overriding them through `generation_kwargs` would break the grouping of the
# answer or its token-level payload.
_RESERVED_REQUEST_FIELDS = frozenset({"prompt", "n", "return_token_ids", "return_tokens_as_token_ids", "stream"})

_COMPLETIONS_PATH = "/v1/completions"
# HTTP statuses worth retrying besides 5xx; and the 4xx of a completion request that no prompt can cause.
_TRANSIENT_STATUSES = frozenset({408, 429})
_CONFIGURATION_STATUSES = frozenset({401, 403, 404})

_HEALTH_POLL_SECONDS = 1.0
_STAT_KEYS = (
    "requests",
    "retries",
    "infrastructure_failures",
    "bad_data",
    "out_of_time",
    "weight_pushes",
    "weight_resyncs",
    "weight_refusals",
    "stale_completions",
)


class VLLMServerRequestError(RuntimeError):
    """The server rejected a request with an HTTP 4xx that concerns the configuration (see the module docstring)."""

    def __init__(self, method: str, url: str, status_code: int, detail: str) -> None:
        super().__init__(
            f"vLLM server rejected {method} {url} with HTTP {status_code}: {detail}. This is a configuration error "
            "(for example a wrong model name or missing credentials) and is not retried."
        )
        self.status_code = status_code


class VLLMServerUnavailableError(ConnectionError):
    """The server has not come up within ``connection_timeout`` seconds of the first request."""

    def __init__(self, base_url: str, connection_timeout: float, cause: str) -> None:
        super().__init__(
            f"the vLLM server at {base_url} has not come up within {connection_timeout:g} s of the first request "
            f"({cause}): is it running, at this address? (connection_timeout / vllm_server_timeout)"
        )


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _is_token_id_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)


def _logprob_value(value: Any, position: int) -> float:
    """One position's logprob as a float: null and NaN become NaN; anything but a number is malformed."""
    if value is None:
        return math.nan
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ValueError(f"logprob {value!r} at position {position} is not a number")
    return float(value)


def _sampled_logprobs(choice_logprobs: Any, token_ids: list[int]) -> list[float]:
    """Return the logprob of each sampled token from a completions-format ``logprobs`` object.

    The object is ``{"tokens": [...], "token_logprobs": [...], "top_logprobs": [...]}`` with every token written
    ``"token_id:<id>"``. As in TRL's `parse_logprobs`, a position's entries are the sampled token's plus its
    alternatives; the entry whose id equals the sampled id is kept. A null or NaN value for that entry (vLLM could not
    score the token) becomes NaN, which TRL leaves out of its importance-sampling correction. Raises ValueError when
    the object is malformed or a sampled token has no entry at all.
    """
    if not isinstance(choice_logprobs, dict):
        raise ValueError(f"malformed logprobs of type {type(choice_logprobs).__name__}")
    tokens, values = choice_logprobs.get("tokens"), choice_logprobs.get("token_logprobs")
    alternatives = choice_logprobs.get("top_logprobs") or [None] * len(token_ids)
    if not (isinstance(tokens, list) and isinstance(values, list) and isinstance(alternatives, list)):
        raise ValueError("malformed logprobs (tokens, token_logprobs and top_logprobs must be lists)")
    if not len(tokens) == len(values) == len(alternatives) == len(token_ids):
        raise ValueError(f"{len(values)} logprobs for {len(token_ids)} tokens")
    sampled = []
    for position, (token_id, token, value, others) in enumerate(
        zip(token_ids, tokens, values, alternatives, strict=True)
    ):
        if others is not None and not isinstance(others, dict):
            raise ValueError(f"malformed top_logprobs at position {position}")
        entries = {token: value, **(others or {})}
        key = f"token_id:{token_id}"
        if key not in entries:
            raise ValueError(f"no logprob for sampled token {token_id} at position {position}")
        sampled.append(_logprob_value(entries[key], position))
    return sampled


class VLLMServerBackend:
    """Generate with a vLLM OpenAI-compatible server (``vllm serve``), the protocol TRL's `VLLMClient` speaks.

    Each unique prompt is tokenized here (`encode_prompts`, the same way TRL does) and sent as one
    ``POST /v1/completions`` request asking for ``n = counts[i]`` completions; up to ``max_concurrency`` requests are
    in flight at once. The returned `Completion` carries the prompt ids the server reports having used (it may
    truncate), the sampled ids (EOS included) and the sampled tokens' logprobs.

    Args:
        base_url: server root, e.g. ``http://host:8000`` (without ``/v1``).
        tokenizer: the training tokenizer; ``len(tokenizer)`` is the vocabulary completions are checked against.
        sampling: how to sample (`SamplingSettings`). Its ``generation_kwargs`` are extra request fields, sent as-is
            and overriding the others (``seed``, ``logprobs``, ``model`` to address a LoRA adapter by name, ...); the
            fields that shape the answer (``prompt``, ``n``, ``return_token_ids``, ``return_tokens_as_token_ids``,
            ``stream``) are refused. Its ``structured_outputs_regex`` is sent as ``structured_outputs: {"regex": ...}``
            the way TRL's `VLLMClient` sends it; a ``structured_outputs`` field in ``generation_kwargs`` overrides it,
            as there.
        request_timeout: seconds one request may take, from connecting to the last byte of the answer (a server
            that trickles its answer is cut off too). TRL's client sets no timeout, so a stalled server hangs training
            forever; here the request fails as an infrastructure failure and is retried.
        max_attempts: tries per request for infrastructure failures (connection errors, timeouts, HTTP 5xx).
        backoff_seconds: base of the exponential backoff between tries: ``backoff_seconds * 2**k``, jittered to
            between half and all of it.
        max_concurrency: most requests in flight at once.
        connection_timeout: seconds the server has to come up, counted from the first request: until it has answered
            once, calls wait for it; once this has passed, a call whose quick probe still finds no server raises
            `VLLMServerUnavailableError` (the trainer retries, then stops after
            ``generation_max_consecutive_empty_batches`` batches with that message).
        weights_directory: the disk transport (`server_weight_sync`): `sync_weights` writes each new version of the
            training weights here, and before every generation call the server is checked to serve it, and loads it
            (again, after a restart) when it does not. The server must read this directory under the same path and
            run with ``VLLM_SERVER_DEV_MODE=1`` and the worker extension (``maxent-grpo vllm-serve`` starts one so).
            A server that keeps refusing the weights stops training (`WeightsRefused`); completions generated while
            the server's version changed are marked failed and counted (``stale_completions``).
        weight_source: with ``weights_directory``, the model's tensors under vLLM's names; default
            ``model.named_parameters()``. The trainer passes TRL's parameter walk, which gathers DeepSpeed ZeRO-3 and
            FSDP shards and merges PEFT adapters.
        weight_sync: a push of your own, called by `sync_weights` (the trainer passes TRL's NCCL push,
            ``VLLMGeneration.sync_weights``, for ``vllm_weight_transfer="nccl"``). Without it or ``weights_directory``
            the server keeps its own weights and generation is off-policy; a warning says so once.

    With a time budget for the generation step (`set_deadline`, which the trainer calls when
    ``generation_step_timeout`` is set), each try also ends by the step's deadline, backoff never sleeps past it, and
    once it has passed nothing more is sent: what is still missing comes back empty, logged as ``out of time``.

    ``stats`` counts ``requests`` (HTTP completion requests sent, every try included), ``retries`` (tries that failed
    and were tried again), ``infrastructure_failures`` (requests abandoned after ``max_attempts``: their prompts came
    back empty; and calls not sent because the server did not serve the trainer's weight version), ``bad_data``
    (answers or completions that were short, out of vocabulary, empty or malformed, and prompts the server rejected),
    ``out_of_time`` (requests given up, or not sent, because the step's time budget was spent) and, with
    ``weights_directory``, ``weight_pushes`` (versions loaded into the server), ``weight_resyncs`` (pushes of a version
    the server had already been given: it restarted), ``weight_refusals`` (pushes the server answered but did not take)
    and ``stale_completions`` (completions marked failed because the server's version changed while they were
    generated).
    """

    def __init__(
        self,
        base_url: str,
        *,
        tokenizer: PreTrainedTokenizerBase,
        sampling: SamplingSettings,
        request_timeout: float = 120.0,
        max_attempts: int = 3,
        backoff_seconds: float = 1.0,
        max_concurrency: int = 16,
        connection_timeout: float = 60.0,
        weight_sync: Callable[[], None] | None = None,
        weights_directory: str | Path | None = None,
        weight_source: WeightSource = parameters,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http:// or https:// URL, got {base_url!r}")
        if tokenizer is None:
            raise ValueError("tokenizer must be the training tokenizer, got None")
        if weight_sync is not None and not callable(weight_sync):
            raise ValueError(f"weight_sync must be a callable taking no arguments or None, got {weight_sync!r}")
        if weight_sync is not None and weights_directory is not None:
            raise ValueError(
                "give weight_sync (a push of your own) or weights_directory (the disk transport), not both"
            )
        self.base_url = base_url.rstrip("/")
        self.tokenizer = tokenizer
        self.vocab_size = len(tokenizer)
        reserved = sorted(_RESERVED_REQUEST_FIELDS & sampling.generation_kwargs.keys())
        if reserved:
            raise ValueError(
                f"generation_kwargs must not set {reserved}: the backend sets them itself, got "
                f"{sampling.generation_kwargs!r}"
            )
        self.sampling = sampling
        regex = sampling.structured_outputs_regex
        self.structured_outputs = {} if regex is None else {"structured_outputs": {"regex": regex}}
        # Logprobs are asked for (``logprobs: 0``, the sampled token's) unless `generation_kwargs` turns them off.
        self.wants_logprobs = sampling.wants_logprobs
        self.request_timeout = check_number("request_timeout", request_timeout, low=0.0, low_open=True)
        self.max_attempts = check_int("max_attempts", max_attempts, low=1)
        self.backoff_seconds = check_number("backoff_seconds", backoff_seconds, low=0.0)
        self.max_concurrency = check_int("max_concurrency", max_concurrency, low=1)
        self.connection_timeout = check_number("connection_timeout", connection_timeout, low=0.0)
        self.weight_sync = weight_sync

        self.stats: dict[str, int] = dict.fromkeys(_STAT_KEYS, 0)
        self._stats_lock = threading.Lock()
        self._model_lock = threading.Lock()
        self._model: str | None = None
        self._warned_off_policy = False
        self._jitter = random.Random()
        self._step_deadline: float | None = None
        self._first_contact: float | None = None
        self._rejected: set[tuple[int, ...]] = set()
        self._session = self._make_session()
        self._weights = (
            None
            if weights_directory is None
            else ServerWeightSync(
                self.base_url,
                self._session,
                WeightDirectory(weights_directory),
                source=weight_source,
                request_timeout=self.request_timeout,
                max_attempts=self.max_attempts,
                backoff=self._backoff,
                time_left=self._time_left,
                count=self._count,
            )
        )
        self._seeds = RequestSeeds(sampling.seed, sampling.process_index)

    # ----------------------------------------------------------------------------------------------------- public

    def generate(self, prompts: Sequence[Any], counts: Sequence[int]) -> list[list[Completion]]:
        """Return ``counts[i]`` completions (or fewer, see the module docstring) for each prompt, aligned with it."""
        if len(prompts) != len(counts):
            raise ValueError(f"counts must have one entry per prompt ({len(prompts)}), got {len(counts)}")
        for i, count in enumerate(counts):
            check_int(f"counts[{i}]", count, low=0)
        groups: list[list[Completion]] = [[] for _ in prompts]
        asked = [i for i, count in enumerate(counts) if count > 0]
        weights = self._weights
        seeds = self._seeds.next_call(len(asked))
        if not asked:
            if weights is not None and weights.pusher and self._time_left() > 0:
                weights.ensure()  # another process may be waiting for this one to push
            return groups
        if self._time_left() <= 0:
            self._out_of_time(f"{len(asked)} prompt(s) not sent", len(asked))
            return groups
        prompt_ids = encode_prompts(self.tokenizer, [prompts[i] for i in asked], self.sampling.chat_template_kwargs)
        model = self._ensure_model()
        if model is None:
            return groups
        if weights is not None and not weights.ensure():
            self._count("infrastructure_failures")
            logger.warning(
                "not generating for %d prompt(s): the vLLM server at %s does not serve the training weights (version "
                "%r); their groups are retried or dropped",
                len(asked),
                self.base_url,
                weights.version,
            )
            return groups
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(asked))) as executor:
            futures = [
                executor.submit(self._generate_group, model, ids, counts[i], seed)
                for i, ids, seed in zip(asked, prompt_ids, seeds, strict=True)
            ]
            for i, future in zip(asked, futures, strict=True):
                groups[i] = self._result_or_cancel(future, futures)
        if weights is None or weights.version is None:
            return groups
        if not weights.still_serves():
            return self._stale(groups, weights.version)
        return [[replace(c, weight_version=weights.version) for c in group] for group in groups]

    def _stale(self, groups: list[list[Completion]], version: str | None) -> list[list[Completion]]:
        """The completions of a call during which the server stopped serving the trainer's version, marked failed."""
        stale = sum(len(group) for group in groups)
        if not stale:
            return groups
        self._count("stale_completions", stale)
        logger.warning(
            "%d completion(s) from the vLLM server at %s may come from weights older than the trainer's (version %r "
            "was replaced while they were generated): marked failed, so they are asked for again",
            stale,
            self.base_url,
            version,
        )
        return [[replace(c, failed=True) for c in group] for group in groups]

    @property
    def weight_version(self) -> str | None:
        """With ``weights_directory``: the version of the latest training weights `sync_weights` wrote, which the
        server must serve before it generates (None before the first sync, and without ``weights_directory``)."""
        return None if self._weights is None else self._weights.version

    def set_deadline(self, deadline: float | None) -> None:
        """Bound every request that follows by ``deadline``, a `time.monotonic` instant (None: no bound but
        ``request_timeout``). The trainer sets it for the calls of a generation step with a time budget."""
        self._step_deadline = deadline

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make the training weights the ones the server must serve: with ``weights_directory``, write them as a new
        version (loaded into the server before the next generation call); with ``weight_sync``, push them through it.

        Without either there is no way to update the server from here: it keeps the weights it was started
        with, every completion comes from that fixed policy (off-policy generation), and a warning says so once.
        """
        if self._weights is not None:
            self._weights.write(model)
            return
        if self.weight_sync is not None:
            self.weight_sync()
            return
        if not self._warned_off_policy:
            self._warned_off_policy = True
            logger.warning(
                "VLLMServerBackend has no weights_directory or weight_sync: the server keeps its own weights: "
                "generation is off-policy "
                "(completions come from the model the server at %s was started with).",
                self.base_url,
            )

    def cancel_requests(self) -> None:
        """Cut off every request in flight now (weight pushes included); each ends as an infrastructure failure, and
        with a deadline already passed (`set_deadline`) none is tried again."""
        for adapter in {id(a): a for a in self._session.adapters.values()}.values():
            if isinstance(adapter, DeadlineAdapter):
                adapter.cut_off_all()

    def token_prompts(self, prompts: Sequence[Any]) -> list[TokenPrompt]:
        """``prompts`` as the token ids this backend would send them as (tokenized here, on the caller's thread)."""
        encoded = encode_prompts(self.tokenizer, list(prompts), self.sampling.chat_template_kwargs)
        return [TokenPrompt(tuple(ids)) for ids in encoded]

    def close(self) -> None:
        """Close the HTTP connections."""
        self._session.close()

    # ----------------------------------------------------------------------------------------------------- HTTP

    def _make_session(self) -> requests.Session:
        # `max_retries=0`: urllib3 must not retry behind our back; `_send` owns the retry policy.
        session = requests.Session()
        adapter = DeadlineAdapter(max_retries=0, pool_maxsize=self.max_concurrency)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        return session

    def _count(self, key: str, amount: int = 1) -> None:
        with self._stats_lock:
            self.stats[key] += amount

    def _time_left(self) -> float:
        """Seconds left of the current generation step's budget (infinite without one)."""
        return math.inf if self._step_deadline is None else self._step_deadline - time.monotonic()

    def _backoff(self, attempt: int) -> None:
        delay = self.backoff_seconds * 2 ** (attempt - 1) * self._jitter.uniform(0.5, 1.0)
        time.sleep(max(min(delay, self._time_left()), 0.0))

    def _out_of_time(self, what: str, amount: int = 1) -> None:
        self._count("out_of_time", amount)
        logger.warning("out of time: %s: the generation step's time budget is spent", what)

    def _send(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Answer | None:
        """Send one request with retries; return the answer, or None after ``max_attempts`` failures or out of time.

        The answer is a 2xx/3xx one, or the 4xx with which the server rejected a completion request's prompt. Each try
        ends by ``request_timeout`` or the step's deadline, whichever comes first. Raises `VLLMServerRequestError` on a
        4xx that concerns the configuration (see the module docstring).
        """
        url = f"{self.base_url}{path}"
        cause = "not sent"
        for attempt in range(1, self.max_attempts + 1):
            time_left = self._time_left()
            if attempt > 1 and time_left > 0:
                self._count("retries")
                logger.info(
                    "%s %s failed (attempt %d of %d), retrying: %s", method, url, attempt - 1, self.max_attempts, cause
                )
                self._backoff(attempt - 1)
                time_left = self._time_left()
            if time_left <= 0:
                break
            if payload is not None:  # a completion request (GET /v1/models is not counted)
                self._count("requests")
            try:
                answer = exchange(
                    self._session, method, url, payload, time.monotonic() + min(self.request_timeout, time_left)
                )
            except TRANSIENT_ERRORS as exc:
                cause = _describe(exc)
                continue
            if answer.status < 400:
                return answer
            if answer.status < 500 and answer.status not in _TRANSIENT_STATUSES:
                if path == _COMPLETIONS_PATH and answer.status not in _CONFIGURATION_STATUSES:
                    return answer
                raise VLLMServerRequestError(method, url, answer.status, answer.text(500))
            cause = f"HTTP {answer.status}: {answer.text(200)}"
        if self._time_left() <= 0:
            self._out_of_time(f"{method} {url} given up ({cause})")
            return None
        self._count("infrastructure_failures")
        logger.warning(
            "infrastructure failure: %s %s failed after %d attempt(s): %s", method, url, self.max_attempts, cause
        )
        return None

    def _wait_for_health(self, budget: float) -> str | None:
        """Poll ``GET /health`` until it answers 200 (return None) or ``budget`` seconds (or the step's budget) have
        passed (return the last cause). At least one poll is made."""
        url = f"{self.base_url}/health"
        deadline = time.monotonic() + min(budget, self._time_left())
        while True:
            poll_timeout = min(self.request_timeout, max(deadline - time.monotonic(), _HEALTH_POLL_SECONDS))
            try:
                response = self._session.get(url, timeout=poll_timeout)
            except TRANSIENT_ERRORS as exc:
                cause = _describe(exc)
            else:
                if response.status_code == 200:
                    return None
                cause = f"HTTP {response.status_code}"
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return cause
            logger.info("waiting for the vLLM server at %s to come up (%s)", self.base_url, cause)
            time.sleep(min(_HEALTH_POLL_SECONDS, remaining))

    def _ensure_model(self) -> str | None:
        """Return the served model id, connecting first if needed; None (logged) when the server stopped answering.

        Until the server has answered once, each call waits for it to come up, all calls together for at most
        ``connection_timeout`` seconds from the first; after that a server still not up raises
        `VLLMServerUnavailableError` at once on every call (after one quick probe, so a server that comes up late is
        still picked up).
        """
        with self._model_lock:
            if self._model is not None:
                return self._model
            if self._first_contact is None:
                self._first_contact = time.monotonic()
            waited = time.monotonic() - self._first_contact
            cause = self._wait_for_health(max(self.connection_timeout - waited, 0.0))
            if cause is not None and self._time_left() > 0:
                raise VLLMServerUnavailableError(self.base_url, self.connection_timeout, cause)
            answer = self._send("GET", "/v1/models")
            if answer is None:
                return None
            try:
                self._model = str(answer.json()["data"][0]["id"])
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                self._count("bad_data")
                logger.warning("bad data: GET %s/v1/models answered without a model id (%s)", self.base_url, exc)
                return None
            logger.info("vLLM server at %s serves model %r", self.base_url, self._model)
            return self._model

    @staticmethod
    def _result_or_cancel(
        future: Future[list[Completion]], futures: list[Future[list[Completion]]]
    ) -> list[Completion]:
        """Return one request's group; on a configuration error cancel the requests not started yet and re-raise."""
        try:
            return future.result()
        except VLLMServerRequestError:
            for other in futures:
                other.cancel()
            raise

    # ----------------------------------------------------------------------------------------------------- parsing

    def _generate_group(self, model: str, prompt_ids: list[int], count: int, seed: int | None) -> list[Completion]:
        payload = {
            "model": model,
            "prompt": prompt_ids,
            "n": count,
            **self.sampling.sampling_fields(),
            "logprobs": 0,
            **self.structured_outputs,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            **self.sampling.generation_kwargs,
            **({} if seed is None else {"seed": seed}),
        }
        where = f"POST {self.base_url}{_COMPLETIONS_PATH}"
        key = tuple(prompt_ids)
        if key in self._rejected:
            logger.info("%s: not sent: the server rejected this prompt before (its group is left empty)", where)
            return []
        answer = self._send("POST", _COMPLETIONS_PATH, payload)
        if answer is None:
            return []
        if answer.status >= 400:
            self._rejected.add(key)
            return self._bad_group(
                f"{where} rejected the prompt with HTTP {answer.status}: {answer.text(500)}; its group is left empty "
                "(the prompt is not sent again)"
            )
        try:
            choices = answer.json()["choices"]
        except (ValueError, KeyError, TypeError) as exc:
            return self._bad_group(f"{where} answered without a choices list ({_describe(exc)})")
        if not isinstance(choices, list):
            return self._bad_group(f"{where} answered with choices of type {type(choices).__name__}")
        if len(choices) < count:
            self._bad_data(f"{where}: short group: got {len(choices)} of {count}")
        elif len(choices) > count:
            self._bad_data(f"{where}: long group: got {len(choices)} of {count}, extra ones dropped")
        group = []
        for choice in choices[:count]:
            completion = self._parse_choice(choice, prompt_ids, where)
            if completion is not None:
                group.append(completion)
        return group

    def _bad_data(self, message: str) -> None:
        self._count("bad_data")
        logger.warning("bad data: %s", message)

    def _bad_group(self, message: str) -> list[Completion]:
        self._bad_data(message)
        return []

    def _parse_choice(self, choice: Any, sent_prompt_ids: list[int], where: str) -> Completion | None:
        """Turn one choice into a `Completion`; None when it is too malformed to be one (logged as bad data)."""
        if not isinstance(choice, dict) or not _is_token_id_list(choice.get("token_ids")):
            self._bad_data(f"{where}: choice without a token_ids list (is the server a vLLM with return_token_ids?)")
            return None
        token_ids: list[int] = choice["token_ids"]
        text = choice.get("text")
        text = text if isinstance(text, str) else ""
        prompt_ids = choice.get("prompt_token_ids")
        prompt_ids = prompt_ids if _is_token_id_list(prompt_ids) else sent_prompt_ids
        problem = self._token_problem(token_ids)
        if problem is not None:
            self._bad_data(f"{where}: {problem}, completion marked failed")
            return Completion(text=text, prompt_ids=prompt_ids, completion_ids=token_ids, failed=True)
        if choice.get("logprobs") is None:
            if self.wants_logprobs:
                self._bad_data(f"{where}: no logprobs although they were asked for, completion marked failed")
                return Completion(text=text, prompt_ids=prompt_ids, completion_ids=token_ids, failed=True)
            return Completion(text=text, prompt_ids=prompt_ids, completion_ids=token_ids)
        try:
            logprobs = _sampled_logprobs(choice["logprobs"], token_ids)
        except ValueError as exc:
            self._bad_data(f"{where}: {exc}, completion marked failed")
            return Completion(text=text, prompt_ids=prompt_ids, completion_ids=token_ids, failed=True)
        unscored = sum(math.isnan(value) for value in logprobs)
        if unscored:
            logger.info("%s: %d of %d token logprobs are NaN, kept as NaN", where, unscored, len(logprobs))
        return Completion(text=text, prompt_ids=prompt_ids, completion_ids=token_ids, logprobs=logprobs)

    def _token_problem(self, token_ids: list[int]) -> str | None:
        if not token_ids:
            return "empty completion"
        outside = [t for t in token_ids if t < 0 or t >= self.vocab_size]
        if outside:
            return f"token ids {outside[:5]} outside the vocabulary [0, {self.vocab_size})"
        return None
