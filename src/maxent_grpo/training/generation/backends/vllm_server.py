"""`VLLMServerBackend`: completions from a vLLM OpenAI-compatible server, spoken to the way TRL's `VLLMClient` does.

The server is the one ``vllm serve <model> --logprobs-mode processed_logprobs`` starts (add
``--weight-transfer-config`` so the trainer can push weights into it). This backend uses three endpoints:

- ``GET /health``: waited on before the first request, for at most ``connection_timeout`` seconds in all, with one
  warning and then one ``still waiting`` line every 30 s (a server that has not come up by then raises
  `VLLMServerUnavailableError`, which stops training);
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

A server that hangs (the process is up, ``GET /health`` answers, completions never come back) is treated like one
that died: once a request has been given up on its ``request_timeout``, the next calls first send a *canary* (a
one-token completion, `CANARY_TIMEOUT_SECONDS` at most) and generate nothing, as an infrastructure failure, until one
is answered. A server that restarted serving another model than before (``GET /v1/models``, asked before each weight
push) is noticed before it is sent the training weights: `ServedModelChanged`.

The HTTP side (connecting, retries, backoff) is `server_client.transport`, the request bodies and the reading of
answers `server_client.wire`, and the weight transfer `weights.transfer` (one type per transfer, picked when the
backend is built); this module puts them together.
"""

from __future__ import annotations

import logging
import math
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

from maxent_grpo.serving import routes
from maxent_grpo.serving.key_guard import authorization_headers
from maxent_grpo.training.generation.backends.prompt_encoding import encode_prompts
from maxent_grpo.training.generation.backends.request_seeds import RequestSeeds
from maxent_grpo.training.generation.contract.completion_check import CompletionCheck
from maxent_grpo.training.generation.contract.protocol import Completion, TokenPrompt
from maxent_grpo.training.generation.contract.sampling import SamplingSettings, check_int, check_number
from maxent_grpo.training.generation.server_client.http_deadline import TRANSIENT_ERRORS, DeadlineAdapter, exchange
from maxent_grpo.training.generation.server_client.transport import (
    COMPLETIONS_PATH,
    ServerTransport,
    VLLMServerRequestError,
)
from maxent_grpo.training.generation.server_client.wire import (
    MalformedAnswer,
    answer_choices,
    check_generation_kwargs,
    completion_payload,
    group_size_problem,
    parse_choice,
)
from maxent_grpo.training.generation.weights.callable_push import CallablePush
from maxent_grpo.training.generation.weights.directory import WeightDirectory
from maxent_grpo.training.generation.weights.no_transfer import NoTransfer
from maxent_grpo.training.generation.weights.server_sync import ServerWeightSync, WeightSource, parameters
from maxent_grpo.training.generation.weights.transfer import WeightTransfer

logger = logging.getLogger(__name__)

#: Seconds a canary (a one-token completion asking whether a server that hung answers again) may take.
CANARY_TIMEOUT_SECONDS = 15.0


class ServedModelChanged(VLLMServerRequestError):
    """The server serves another model than the one it served before (it restarted with another): a configuration
    error, never retried. A `VLLMServerPool` marks such a member down and goes on with the others."""

    def __init__(self, base_url: str, expected: str, served: list[str]) -> None:
        RuntimeError.__init__(
            self,
            f"the vLLM server at {base_url} serves {', '.join(map(repr, served)) or 'no model'}, not {expected!r}, "
            "the model the trainer generates with: it was restarted with another model",
        )
        self.status_code = 404
        self.expected = expected
        self.served = served


_STAT_KEYS = (
    "requests",
    "retries",
    "infrastructure_failures",
    "timeouts",
    "bad_data",
    "out_of_time",
    "weight_pushes",
    "weight_resyncs",
    "weight_refusals",
    "stale_completions",
)
#: The ``stats`` that are seconds, not counts.
_SECONDS_KEYS = ("weight_write_seconds", "weight_reload_seconds")


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
            once, calls wait for it (`HealthWait`: one warning, then one line every 30 s); once this has passed, a
            call whose quick probe still finds no server raises `VLLMServerUnavailableError`, a `GenerationStopped`:
            training stops at once with that message. The trainer's built-in backend gets ``vllm_server_timeout``.
        weights_directory: the disk transport (`weights.server_sync`): `sync_weights` writes each new version of the
            training weights here, and before every generation call the server is checked to serve it, and loads it
            (again, after a restart) when it does not. The server must read this directory under the same path and
            run with ``VLLM_SERVER_DEV_MODE=1`` and the worker extension (``maxent-grpo vllm-serve`` starts one so).
            A server that keeps refusing the weights stops training (`WeightsRefused`); completions generated while
            the server's version changed are marked failed and counted (``stale_completions``).
        weight_delta: with ``weights_directory`` given as a path, write each version after the first as a delta
            against the one before (`weight_delta`; the pushing process and the server each keep a host copy of the
            weights). A `WeightDirectory` given as ``weights_directory`` says so itself.
        weight_source: with ``weights_directory``, the model's tensors under vLLM's names; default
            ``model.named_parameters()``. The trainer passes TRL's parameter walk, which gathers DeepSpeed ZeRO-3 and
            FSDP shards and merges PEFT adapters.
        weight_write_behind: with ``weights_directory``, `stage_weights` writes the files on a thread of their own,
            behind the training step, until `finish_staged_weights` (which the trainer calls before the optimizer
            next changes the weights); a push of that version waits for them. Only where ``weight_source`` yields
            the model's live parameters and nothing else changes them before then: the trainer turns it on with
            ``async_generation`` unless DeepSpeed (whose optimizer steps inside the backward pass), FSDP, a model
            sharded when it was loaded (DTensor parameters) or PEFT trains the model.
        weight_sync: a push of your own, taking no arguments, called by `sync_weights` (`CallablePush`).
        weight_transfer: a `WeightTransfer` of your own (the trainer passes `NCCLTransfer`, TRL's NCCL push, for
            ``vllm_weight_transfer="nccl"``). Without it, ``weight_sync`` or ``weights_directory`` the server keeps its
            own weights and generation is off-policy (`NoTransfer`); a warning says so once. At most one of the three
            may be given.
        api_key: the server's key (``maxent-grpo vllm-serve --api-key``, vLLM's ``VLLM_API_KEY``): every request,
            the weight push's included, carries it as ``Authorization: Bearer <key>``. None: no key.

    With a time budget for the generation step (`set_deadline`, which the trainer calls when
    ``generation_step_timeout`` is set), each try also ends by the step's deadline, backoff never sleeps past it, and
    once it has passed nothing more is sent: what is still missing comes back empty, logged as ``out of time``.

    ``stats`` counts ``requests`` (HTTP completion requests sent, every try included), ``retries`` (tries that failed
    and were tried again), ``infrastructure_failures`` (requests abandoned after ``max_attempts``: their prompts came
    back empty; and calls not sent because the server did not serve the trainer's weight version or, after it hung,
    did not answer its canary), ``timeouts`` (of those, requests and weight pushes whose last try ran out its
    ``request_timeout``: the server hung), ``bad_data``
    (answers or completions that were short, out of vocabulary, empty or malformed, and prompts the server rejected),
    ``out_of_time`` (requests given up, or not sent, because the step's time budget was spent) and, with
    ``weights_directory``, ``weight_pushes`` (versions loaded into the server), ``weight_resyncs`` (pushes of a version
    the server had already been given: it restarted), ``weight_refusals`` (pushes the server answered but did not
    take), ``stale_completions`` (completions marked failed because the server's version changed while they were
    generated), and two sums of seconds (floats): ``weight_write_seconds`` (writing each version, `sync_weights` or
    `stage_weights`: the walk of the parameters and, on the pushing process, the files) and ``weight_reload_seconds``
    (the pushing process's pushes into the server: the reload, the prefix-cache reset and the version's claim, every
    try and the backoff between them included).
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
        weight_transfer: WeightTransfer | None = None,
        weights_directory: str | Path | WeightDirectory | None = None,
        weight_delta: bool = False,
        weight_source: WeightSource = parameters,
        weight_write_behind: bool = False,
        api_key: str | None = None,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http:// or https:// URL, got {base_url!r}")
        if tokenizer is None:
            raise ValueError("tokenizer must be the training tokenizer, got None")
        if weight_sync is not None and not callable(weight_sync):
            raise ValueError(f"weight_sync must be a callable taking no arguments or None, got {weight_sync!r}")
        if weight_transfer is not None and not isinstance(weight_transfer, WeightTransfer):
            raise ValueError(f"weight_transfer must be a WeightTransfer or None, got {weight_transfer!r}")
        ways = {"weight_sync": weight_sync, "weight_transfer": weight_transfer, "weights_directory": weights_directory}
        if len(given := [name for name, way in ways.items() if way is not None]) > 1:
            raise ValueError(f"give one way for the weights to reach the server, not {' and '.join(given)}")
        self.base_url = base_url.rstrip("/")
        self.tokenizer = tokenizer
        self.vocab_size = len(tokenizer)
        check_generation_kwargs(sampling.generation_kwargs)
        self.sampling = sampling
        # Logprobs are asked for (``logprobs: 0``, the sampled token's) unless `generation_kwargs` turns them off.
        self.wants_logprobs = sampling.wants_logprobs
        self.request_timeout = check_number("request_timeout", request_timeout, low=0.0, low_open=True)
        self.max_attempts = check_int("max_attempts", max_attempts, low=1)
        self.backoff_seconds = check_number("backoff_seconds", backoff_seconds, low=0.0)
        self.max_concurrency = check_int("max_concurrency", max_concurrency, low=1)
        self.connection_timeout = check_number("connection_timeout", connection_timeout, low=0.0)

        self.stats: dict[str, float] = dict.fromkeys(_STAT_KEYS, 0) | dict.fromkeys(_SECONDS_KEYS, 0.0)
        self._stats_lock = threading.Lock()
        self._check = CompletionCheck(self.vocab_size)
        self._rejected: set[tuple[int, ...]] = set()
        self._hung = False  # a request was given up on its own timeout: a canary must be answered first
        self._transport = ServerTransport(
            self.base_url,
            request_timeout=self.request_timeout,
            max_attempts=self.max_attempts,
            backoff_seconds=self.backoff_seconds,
            max_concurrency=self.max_concurrency,
            connection_timeout=self.connection_timeout,
            count=self._count,
            log=logger,
        )
        self._transport.session.headers.update(authorization_headers(api_key))
        self._weights = self._chosen_transfer(
            weight_sync,
            weight_transfer,
            weights_directory,
            weight_delta=weight_delta,
            weight_source=weight_source,
            write_behind=weight_write_behind,
        )
        self._seeds = RequestSeeds(sampling.seed, sampling.process_index)

    def _chosen_transfer(
        self,
        weight_sync: Callable[[], None] | None,
        weight_transfer: WeightTransfer | None,
        weights_directory: str | Path | WeightDirectory | None,
        *,
        weight_delta: bool,
        weight_source: WeightSource,
        write_behind: bool,
    ) -> WeightTransfer:
        """The one way the weights reach the server, from the constructor's arguments (at most one of the first three
        given)."""
        if weight_transfer is not None:
            return weight_transfer
        if weight_sync is not None:
            return CallablePush(weight_sync)
        if weights_directory is None:
            return NoTransfer(self.base_url)
        return ServerWeightSync(
            self.base_url,
            self._transport.session,
            weights_directory
            if isinstance(weights_directory, WeightDirectory)
            else WeightDirectory(weights_directory, delta=weight_delta),
            source=weight_source,
            request_timeout=self.request_timeout,
            max_attempts=self.max_attempts,
            backoff=self._transport.backoff,
            time_left=self._transport.time_left,
            count=self._count,
            cancelled=lambda: self._transport.abandoned,
            before_push=self._check_model_unchanged,
            write_behind=write_behind,
        )

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
            # Another process may be waiting for this one to push.
            if self._transport.time_left() > 0 and not weights.ensure(wait=False):
                self._not_serving(weights, "no prompt")
            return groups
        if self._transport.time_left() <= 0:
            self._transport.out_of_time(f"{len(asked)} prompt(s) not sent", len(asked))
            return groups
        prompt_ids = encode_prompts(self.tokenizer, [prompts[i] for i in asked], self.sampling.chat_template_kwargs)
        if self._hung and (cause := self.canary(min(CANARY_TIMEOUT_SECONDS, self._transport.time_left()))):
            self._count("infrastructure_failures")
            logger.warning(
                "not generating for %d prompt(s): the vLLM server at %s hung (a request ran out its request_timeout) "
                "and its canary, a one-token completion, was not answered: %s",
                len(asked),
                self.base_url,
                cause,
            )
            return groups
        model = self._transport.served_model()
        if model is None:
            return groups
        timeouts = self.stats["timeouts"]
        if not weights.ensure():
            self._not_serving(weights, f"{len(asked)} prompt(s)")
            return groups
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(asked))) as executor:
            futures = [
                executor.submit(self._generate_group, model, ids, counts[i], seed)
                for i, ids, seed in zip(asked, prompt_ids, seeds, strict=True)
            ]
            for i, future in zip(asked, futures, strict=True):
                groups[i] = self._result_or_cancel(future, futures)
        self._hung = self._hung or self.stats["timeouts"] > timeouts
        if weights.version is None or self._transport.abandoned:
            return groups
        if not weights.still_serves():
            return self._stale(groups, weights.version)
        return [[replace(c, weight_version=weights.version) for c in group] for group in groups]

    def canary(self, timeout: float, model: str | None = None) -> str | None:
        """Ask whether the server answers completions again: ``GET /v1/models`` must list ``model`` (default: the
        model it served before, if any), then a one-token completion must be answered, all within ``timeout``
        seconds. Returns None when it did (and the server is no longer taken for hung), else why not.

        Raises:
            ServedModelChanged: the server answers, serving another model.
        """
        began = time.monotonic()
        # A session of its own: a connection kept alive to the server before it restarted is never reused.
        with requests.Session() as session:
            session.mount("http://", DeadlineAdapter(max_retries=0))
            session.mount("https://", DeadlineAdapter(max_retries=0))
            session.headers.update(self._transport.session.headers)
            try:
                listed = exchange(session, "GET", f"{self.base_url}{routes.MODELS}", None, began + max(timeout, 0.0))
                served = [str(entry["id"]) for entry in listed.json()["data"]] if listed.status == 200 else None
            except (*TRANSIENT_ERRORS, ValueError, KeyError, TypeError):
                served = None
            if served is None:
                return "GET /v1/models was not answered with a model list"
            expected = model or self._transport.known_model or (served[0] if served else None)
            if expected is None:
                return "it serves no model"
            if expected not in served:
                raise ServedModelChanged(self.base_url, expected, served)
            payload = {"model": expected, "prompt": [self.tokenizer.eos_token_id or 0], "max_tokens": 1, "n": 1}
            try:
                answer = exchange(
                    session, "POST", f"{self.base_url}{COMPLETIONS_PATH}", payload, began + max(timeout, 0.0)
                )
            except TRANSIENT_ERRORS as exc:
                return f"its one-token completion was not answered within {timeout:g} s ({type(exc).__name__})"
        if answer.status != 200:
            return f"its one-token completion was answered with HTTP {answer.status}: {answer.text(200)}"
        self._hung = False
        return None

    def served_models(self, timeout: float) -> list[str] | None:
        """The model ids ``GET /v1/models`` lists now, within ``timeout`` seconds (None: no such answer)."""
        return self._transport.served_models(timeout)

    @property
    def served_model(self) -> str | None:
        """The model id the server said it serves (``GET /v1/models``), or None before it has been asked."""
        return self._transport.known_model

    def abandon(self) -> None:
        """Give up the call in progress (a `VLLMServerPool` gave its groups to another server): requests in flight
        are cut off, nothing more is sent, and what is left out is counted neither as a failure nor as out of time."""
        self._transport.abandon()

    def resume(self) -> None:
        """Send again after `abandon`."""
        self._transport.resume()

    def _check_model_unchanged(self) -> None:
        """Before the server is sent the training weights: raise `ServedModelChanged` when it now serves another
        model than before (it restarted with one: the weights would not fit it, or it would serve them under another
        name)."""
        before = self._transport.known_model
        if before is None:
            return
        served = self._transport.served_models(CANARY_TIMEOUT_SECONDS)
        if served is not None and before not in served:
            self._transport.forget_model()
            raise ServedModelChanged(self.base_url, before, served)

    def _not_serving(self, weights: WeightTransfer, what: str) -> None:
        """Count and log a call that sends ``what`` nothing because the server does not serve the trainer's version:
        out of time when the step's deadline ended its push, an infrastructure failure otherwise (nothing once the
        call was abandoned)."""
        if self._transport.abandoned:
            return
        if self._transport.time_left() <= 0:
            self._transport.out_of_time(f"{what} not sent: the weight push to {self.base_url} did not end in time")
            return
        self._count("infrastructure_failures")
        logger.warning(
            "not generating for %s: the vLLM server at %s does not serve the training weights (version %r); their "
            "groups are retried or dropped",
            what,
            self.base_url,
            weights.version,
        )

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
        """The weight transfer's version of the latest training weights `sync_weights` wrote (with
        ``weights_directory``, or a ``weight_transfer`` that keeps versions), which the server must serve before it
        generates; None before the first sync, and for a transfer without versions."""
        return self._weights.version

    def adopt_weight_version(self, version: str) -> None:
        """Serve ``version``, written into the same ``weights_directory`` by another backend (a `VLLMServerPool`
        writes each version once, through its first server's backend): this server is checked to serve it, and loads
        it, before it generates, as after `sync_weights`.

        Raises:
            ValueError: the backend's weight transfer keeps no versions (the disk transfer and a ``weight_transfer``
                of your own that overrides ``adopt`` do).
        """
        self._weights.adopt(version)

    def set_deadline(self, deadline: float | None) -> None:
        """Bound every request that follows by ``deadline``, a `time.monotonic` instant (None: no bound but
        ``request_timeout``). The trainer sets it for the calls of a generation step with a time budget."""
        self._transport.deadline = deadline

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make the training weights the ones the server must serve, by the backend's weight transfer: with
        ``weights_directory``, write them as a new version (loaded into the server before the next generation call);
        with ``weight_sync`` or ``weight_transfer``, push them through it.

        Without any there is no way to update the server from here: it keeps the weights it was started
        with, every completion comes from that fixed policy (off-policy generation), and a warning says so once.
        """
        self._weights.write(model)

    def stage_weights(self, model: torch.nn.Module) -> None:
        """With ``weights_directory``: write the training weights as the next version, while a call from the version
        before may still be in flight; `publish_staged_weights` then makes it the version the server must serve.
        Without it nothing is written yet: `publish_staged_weights` does the whole `sync_weights` of ``model``."""
        self._weights.stage(model)

    def publish_staged_weights(self) -> None:
        """Make the version `stage_weights` wrote the one the server must serve (no call of this backend may be in
        flight); without ``weights_directory``, `sync_weights` of the staged model."""
        self._weights.publish()

    def finish_staged_weights(self) -> None:
        """With ``weight_write_behind``: wait until the files `stage_weights` writes behind are written (on every
        process, before the optimizer next changes the weights); raises `WeightsNotWritten` on every process when
        they could not be. Nothing to do otherwise."""
        self._weights.finish_staged()

    @property
    def disk_weights(self) -> ServerWeightSync | None:
        """The disk transport's versions on this server (`ServerWeightSync`: what the last write and push took, too),
        or None without ``weights_directory``."""
        return self._weights if isinstance(self._weights, ServerWeightSync) else None

    def cancel_requests(self) -> None:
        """Cut off every request in flight now (weight pushes included); each ends as an infrastructure failure, and
        with a deadline already passed (`set_deadline`) none is tried again."""
        self._transport.cut_off_all()

    def token_prompts(self, prompts: Sequence[Any]) -> list[TokenPrompt]:
        """``prompts`` as the token ids this backend would send them as (tokenized here, on the caller's thread)."""
        encoded = encode_prompts(self.tokenizer, list(prompts), self.sampling.chat_template_kwargs)
        return [TokenPrompt(tuple(ids)) for ids in encoded]

    def close(self) -> None:
        """Close the HTTP connections."""
        self._transport.close()

    # ----------------------------------------------------------------------------------------------------- requests

    def _count(self, key: str, amount: float = 1) -> None:
        with self._stats_lock:
            self.stats[key] += amount

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

    def _generate_group(self, model: str, prompt_ids: list[int], count: int, seed: int | None) -> list[Completion]:
        """One prompt's group: one completion request, its answer read (bad data logged and counted)."""
        where = f"POST {self.base_url}{COMPLETIONS_PATH}"
        key = tuple(prompt_ids)
        if key in self._rejected:
            logger.info("%s: not sent: the server rejected this prompt before (its group is left empty)", where)
            return []
        answer = self._transport.send(
            "POST", COMPLETIONS_PATH, completion_payload(model, prompt_ids, count, self.sampling, seed)
        )
        if answer is None:
            return []
        if answer.status >= 400:
            self._rejected.add(key)
            return self._bad_group(
                f"{where} rejected the prompt with HTTP {answer.status}: {answer.text(500)}; its group is left empty "
                "(the prompt is not sent again)"
            )
        try:
            choices = answer_choices(answer)
        except MalformedAnswer as exc:
            return self._bad_group(f"{where} {exc}")
        size_problem = group_size_problem(len(choices), count)
        if size_problem is not None:
            self._bad_data(f"{where}: {size_problem}")
        group = []
        for choice in choices[:count]:
            parsed = parse_choice(choice, prompt_ids, check=self._check, wants_logprobs=self.wants_logprobs)
            if parsed.problem is not None:
                self._bad_data(f"{where}: {parsed.problem}")
            completion = parsed.completion
            if completion is None:
                continue
            if completion.logprobs is not None:
                unscored = sum(math.isnan(value) for value in completion.logprobs)
                if unscored:
                    logger.info(
                        "%s: %d of %d token logprobs are NaN, kept as NaN", where, unscored, len(completion.logprobs)
                    )
            group.append(completion)
        return group

    def _bad_data(self, message: str) -> None:
        self._count("bad_data")
        logger.warning("bad data: %s", message)

    def _bad_group(self, message: str) -> list[Completion]:
        self._bad_data(message)
        return []
