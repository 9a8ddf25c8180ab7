"""`VLLMServerPool`: several vLLM servers behind one backend, each call's prompt groups spread over those that answer.

A pool is what ``vllm_server_base_urls`` with more than one address builds: one `VLLMServerBackend` per server
(each with its own connections, retries, seeds and weight-version checks), all sharing one weights directory (the
disk transport). What the pool adds:

- **Spreading.** Each ``generate`` call hands the prompts, round robin (starting one server further at each call),
  to the servers that are *up*: those that
  answered their last call without an infrastructure failure, and those not known to be up (all of them before the
  first call) whose ``GET /health`` answers (a quick probe before every call but the one right after a server
  failed). A server that fails during a call (refused connection, timeout, 5xx, not
  serving the trainer's weight version in time) is marked down: its groups come back short and the trainer's retry
  rounds ask for the missing completions again, which the pool then sends to the other servers.
- **Weights.** `sync_weights` writes each version once; every server is then checked to serve it before it generates
  (`weights.server_sync`), so a server that restarted gets it again (a resync) before it is given work, while the
  others keep generating.
- **Counts.** ``stats`` sums the servers' counters (the keys of `VLLMServerBackend.stats`) and adds, per server ``k``
  (its index in ``base_urls``), ``servers/<k>/requests``, ``servers/<k>/failures`` (infrastructure failures),
  ``servers/<k>/completions`` and ``servers/<k>/resyncs``; the trainer logs how much each grew per step.

Until a first server has come up, a call waits for one (`HealthWait` over all of them, ``connection_timeout`` in
all) and raises `VLLMServerUnavailableError` when none has, which stops training as with one server. Once one has
been up, a call that finds none up sends nothing: its groups are retried or dropped, and the trainer stops after
``generation_max_consecutive_empty_batches`` empty batches, as with one server that died. Every process makes the
same backend calls (I7); each judges for itself which servers are up, and the process that pushes the weights (rank 0)
loads them, in every call, into every server that answers its ``GET /health``, with or without prompts for it, so
that another process that sends prompts to a server finds it serving the new version. Every process must be given
the same list of servers.

Unlike vLLM's own data parallelism (one server process, several engines behind one address), the servers of a pool
are independent processes, on one machine or several: one that dies or restarts costs its share of a call, not the
run.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import requests
import torch

from maxent_grpo.serving.key_guard import authorization_headers
from maxent_grpo.training.generation.backends.request_seeds import request_seed
from maxent_grpo.training.generation.backends.vllm_server import VLLMServerBackend
from maxent_grpo.training.generation.contract.protocol import Completion, TokenPrompt
from maxent_grpo.training.generation.contract.sampling import SamplingSettings
from maxent_grpo.training.generation.server_client.transport import (
    BACKEND_TIMEOUT_SETTING,
    HealthWait,
    VLLMServerUnavailableError,
)
from maxent_grpo.training.generation.weights.directory import WeightDirectory

logger = logging.getLogger(__name__)

#: Seconds a down server's ``GET /health`` probe may take before each call.
PROBE_TIMEOUT_SECONDS = 2.0
#: The per-server counters in ``VLLMServerPool.stats``, each under ``servers/<k>/<name>``.
SERVER_STAT_NAMES = ("requests", "failures", "completions", "resyncs")


def _member_sampling(sampling: SamplingSettings, k: int) -> SamplingSettings:
    """Server ``k``'s sampling: with a user seed, server ``k > 0`` draws its request seeds from a seed of its own, so
    that a group's retry on another server never repeats the completions it already has (`request_seeds`)."""
    if k == 0 or sampling.seed is None:
        return sampling
    return replace(sampling, seed=request_seed(sampling.seed, k, -1, 0))


class VLLMServerPool:
    """Generate with several vLLM servers; see the module docstring.

    Args:
        base_urls: the servers' root URLs (at least two, all different), e.g. ``["http://gen0:8000",
            "http://gen1:8000"]``; a server's index in this list names it in ``stats`` and in log lines.
        weights_directory: the disk transport's directory, which every server must read under the same path; None:
            the servers keep their own weights (off-policy, warned once).
        weight_delta: with ``weights_directory`` given as a path, write each version after the first as a delta
            (`VLLMServerBackend`'s ``weight_delta``); a server that does not hold the version before gets the whole
            version. A `WeightDirectory` given as ``weights_directory`` says so itself.
        api_key: the servers' key (`key_guard`), the same for all of them; None: no key.
        **options: the other arguments of `VLLMServerBackend` (``tokenizer`` and ``sampling`` among them), the same
            for every server.
    """

    def __init__(
        self,
        base_urls: Sequence[str],
        *,
        weights_directory: str | Path | WeightDirectory | None = None,
        weight_delta: bool = False,
        api_key: str | None = None,
        **options: Any,
    ) -> None:
        urls = [url.rstrip("/") if isinstance(url, str) else url for url in base_urls]
        if len(urls) < 2:
            raise ValueError(f"a pool needs at least two server URLs, got {list(base_urls)!r}")
        repeated = sorted({url for url in urls if urls.count(url) > 1})
        if repeated:
            raise ValueError(f"each server URL must appear once, got {repeated} more than once")
        sampling: SamplingSettings = options.pop("sampling")
        # One directory for all: each version is written once, and a delta's whole weights once, for any server.
        directory = (
            weights_directory
            if weights_directory is None or isinstance(weights_directory, WeightDirectory)
            else WeightDirectory(weights_directory, delta=weight_delta)
        )
        self.servers = [
            VLLMServerBackend(
                url, sampling=_member_sampling(sampling, k), weights_directory=directory, api_key=api_key, **options
            )
            for k, url in enumerate(urls)
        ]
        self.base_urls = [server.base_url for server in self.servers]
        self.wants_logprobs = self.servers[0].wants_logprobs
        self._headers = authorization_headers(api_key)
        self._up = [False] * len(self.servers)  # each is probed before the first call, then judged by its calls
        self._calls = 0
        self._down_at = [-2] * len(self.servers)  # the call in which each server was last marked down (-2: never)
        self._completions = [0] * len(self.servers)
        self._lock = threading.Lock()
        self._ever_up = False
        self._refusing: set[int] = set()  # servers warned about for refusing the key
        self._deadline: float | None = None
        self.connection_timeout = self.servers[0].connection_timeout
        label = "any of " + ", ".join(self.base_urls)
        self._health = HealthWait(
            label, self.connection_timeout, get=self._any_health, log=logger, setting=BACKEND_TIMEOUT_SETTING
        )

    # ----------------------------------------------------------------------------------------------------- public

    def generate(self, prompts: Sequence[Any], counts: Sequence[int]) -> list[list[Completion]]:
        """Return ``counts[i]`` completions (or fewer) for each prompt, aligned with it, from the servers that are up.

        Raises:
            ~maxent_grpo.training.generation.server_client.transport.VLLMServerUnavailableError: no server was up
                and none came up within ``connection_timeout``.
        """
        if len(prompts) != len(counts):
            raise ValueError(f"counts must have one entry per prompt ({len(prompts)}), got {len(counts)}")
        groups: list[list[Completion]] = [[] for _ in prompts]
        self._calls += 1
        answering = self._admit(self._probe([k for k in range(len(self.servers)) if not self._up[k]]))
        up = [k for k in range(len(self.servers)) if self._up[k]]
        if not up and not self._ever_up:
            answering = up = self._wait_for_first()
        asked = [i for i, count in enumerate(counts) if count > 0]
        if not up and asked:
            logger.warning("no vLLM server of the pool answers: %d prompt(s) not sent", len(asked))
        shares: dict[int, list[int]] = {k: [] for k in up}
        for n, i in enumerate(asked if up else [], start=self._calls):  # the first server changes from call to call
            shares[up[n % len(up)]].append(i)
        # The pusher loads the weights into every server that answers, given work or not: another process judges
        # for itself which servers are up, and one that sends prompts to a server waits for it to serve the version.
        called = sorted(set(up) | set(answering)) if self._pusher() else [k for k in up if shares[k]]
        if not called:
            return groups
        error: BaseException | None = None
        with ThreadPoolExecutor(max_workers=len(called)) as executor:
            futures = {
                k: executor.submit(self._call, k, *self._share(shares.get(k, []), prompts, counts)) for k in called
            }
            for k, future in futures.items():
                try:
                    outcome = future.result()
                except VLLMServerUnavailableError as exc:
                    self._mark_down(k, str(exc))
                    continue
                except BaseException as exc:  # raised once the others are cut off
                    if error is None:
                        error = exc
                        self._cut_off(other for other in called if other != k)
                    continue
                for i, group in zip(shares.get(k, []), outcome, strict=True):
                    groups[i] = group
        if error is not None:
            self.set_deadline(self._deadline)
            raise error
        return groups

    @staticmethod
    def _share(indices: list[int], prompts: Sequence[Any], counts: Sequence[int]) -> tuple[list[Any], list[int]]:
        return [prompts[i] for i in indices], [counts[i] for i in indices]

    def _cut_off(self, indices: Iterable[int]) -> None:
        """End the calls of the servers of ``indices`` now: nothing more sent, requests in flight cut off."""
        for k in indices:
            self.servers[k].set_deadline(time.monotonic())
            self.servers[k].cancel_requests()

    @property
    def stats(self) -> dict[str, int]:
        """The servers' counters summed (`VLLMServerBackend.stats`' keys) and each server's own (module docstring)."""
        totals: dict[str, int] = {}
        for k, server in enumerate(self.servers):
            counted = dict(server.stats)
            for key, value in counted.items():
                totals[key] = totals.get(key, 0) + value
            mine = (counted["requests"], counted["infrastructure_failures"], self._completions[k])
            for name, value in zip(SERVER_STAT_NAMES, (*mine, counted["weight_resyncs"]), strict=True):
                totals[f"servers/{k}/{name}"] = value
        return totals

    @property
    def weight_version(self) -> str | None:
        """The version of the latest training weights `sync_weights` wrote (None before the first)."""
        return self.servers[0].weight_version

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Write the training weights once as a new version, which every server must serve before it generates."""
        self.servers[0].sync_weights(model)
        self._adopt()

    def stage_weights(self, model: torch.nn.Module) -> None:
        """Write the training weights once as the next version (`VLLMServerBackend.stage_weights`)."""
        self.servers[0].stage_weights(model)

    def publish_staged_weights(self) -> None:
        """Make the staged version the one every server must serve before it generates."""
        self.servers[0].publish_staged_weights()
        self._adopt()

    def _adopt(self) -> None:
        version = self.servers[0].weight_version
        if version is not None:
            for server in self.servers[1:]:
                server.adopt_weight_version(version)

    def set_deadline(self, deadline: float | None) -> None:
        """Bound every server's requests by ``deadline`` (`VLLMServerBackend.set_deadline`), and the wait for the
        first server to come up."""
        self._deadline = deadline
        for server in self.servers:
            server.set_deadline(deadline)

    def cancel_requests(self) -> None:
        """Cut off every server's requests in flight (`VLLMServerBackend.cancel_requests`)."""
        for server in self.servers:
            server.cancel_requests()

    def token_prompts(self, prompts: Sequence[Any]) -> list[TokenPrompt]:
        """``prompts`` as the token ids the servers are sent them as."""
        return self.servers[0].token_prompts(prompts)

    def close(self) -> None:
        """Close every server's connections."""
        for server in self.servers:
            server.close()

    # ------------------------------------------------------------------------------------------------ internals

    def _pusher(self) -> bool:
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        return not distributed or torch.distributed.get_rank() == 0

    def _call(self, k: int, prompts: list[Any], counts: list[int]) -> list[list[Completion]]:
        server = self.servers[k]
        failures = server.stats["infrastructure_failures"]
        groups = server.generate(prompts, counts)
        with self._lock:
            self._completions[k] += sum(len(group) for group in groups)
        if server.stats["infrastructure_failures"] > failures and self._time_left() > 0:
            self._mark_down(k, "an infrastructure failure (see the lines above)")
        return groups

    def _note_up(self, k: int, why: str) -> None:
        with self._lock:
            again, self._up[k] = self._down_at[k] >= 0, True
            self._ever_up = True
        if again:
            logger.warning(
                "vLLM server %d (%s) answers again (%s): it gets its share of the prompts from this call, once it "
                "serves the training weights",
                k,
                self.base_urls[k],
                why,
            )
        else:
            logger.info("vLLM server %d (%s) is up (%s)", k, self.base_urls[k], why)

    def _wait_for_first(self) -> list[int]:
        """No server has been up yet: poll every server's ``GET /health`` (`HealthWait`'s lines: one warning, then
        one every 30 s) until one answers, within ``connection_timeout`` in all and the step's deadline; the servers
        that answer then.

        Raises:
            VLLMServerUnavailableError: none has come up within ``connection_timeout``.
        """
        budget = min(max(self.connection_timeout - self._health.waited(), 0.0), self._time_left())
        health = self._health.wait(budget)
        if isinstance(health, str):
            if self._time_left() > 0:
                raise self._health.error(health)
            return []
        return self._admit(self._probe(list(range(len(self.servers)))))

    def _any_health(self, url: str, timeout: float) -> requests.Response:
        """`HealthWait`'s one poll, of every server at once: a 200 answer if one gave it, else a failure."""
        answers = self._probe_answers(list(range(len(self.servers))), timeout)
        for answer in answers.values():
            if isinstance(answer, requests.Response) and answer.status_code == 200:
                return answer
        failure = next(iter(answers.values()))
        if isinstance(failure, requests.RequestException):
            raise failure
        return failure

    def _probe_answers(
        self, indices: list[int], timeout: float
    ) -> dict[int, requests.Response | requests.RequestException]:
        def one(k: int) -> requests.Response | requests.RequestException:
            try:
                return requests.get(f"{self.base_urls[k]}/health", headers=self._headers, timeout=timeout)
            except requests.RequestException as exc:
                return exc

        if not indices:
            return {}
        with ThreadPoolExecutor(max_workers=len(indices)) as executor:
            return dict(zip(indices, executor.map(one, indices), strict=True))

    def _probe(self, indices: list[int]) -> dict[int, int | None]:
        """The ``GET /health`` status of each server of ``indices``, all at once, each within
        `PROBE_TIMEOUT_SECONDS` and the step's deadline (None: no answer). A server that refuses the key is warned
        about once."""
        timeout = min(PROBE_TIMEOUT_SECONDS, max(self._time_left(), 0.1))
        statuses: dict[int, int | None] = {}
        for k, answer in self._probe_answers(indices, timeout).items():
            statuses[k] = answer.status_code if isinstance(answer, requests.Response) else None
            if statuses[k] in (401, 403) and k not in self._refusing:
                self._refusing.add(k)
                logger.warning(
                    "vLLM server %d (%s) answers GET /health with HTTP %d: it refuses the trainer's key "
                    "(vllm_server_api_key); it is given no work while it does",
                    k,
                    self.base_urls[k],
                    statuses[k],
                )
        return statuses

    def _admit(self, statuses: dict[int, int | None]) -> list[int]:
        """The servers of ``statuses`` that answered 200; those of them not marked down in the call before this one
        are given work again (the call right after one that marked a server down, the trainer's retry of what it
        lost, goes to the others: this matters for a server that answers its health check but fails its requests)."""
        answering = [k for k, status in statuses.items() if status == 200]
        for k in answering:
            if self._calls > self._down_at[k] + 1:
                self._note_up(k, "its GET /health answers")
        return answering

    def _time_left(self) -> float:
        return math.inf if self._deadline is None else self._deadline - time.monotonic()

    def _mark_down(self, k: int, cause: str) -> None:
        with self._lock:
            was_up, self._up[k] = self._up[k], False
            self._down_at[k] = self._calls
        if was_up:
            logger.warning(
                "vLLM server %d (%s) failed: %s; its prompts go to the other servers until its GET /health answers",
                k,
                self.base_urls[k],
                cause,
            )
