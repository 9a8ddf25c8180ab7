"""`VLLMServerPool`: several vLLM servers behind one backend, each call's prompt groups spread over those that answer.

A pool is what ``vllm_server_base_urls`` with more than one address builds: one `VLLMServerBackend` per server
(each with its own connections, retries, seeds and weight-version checks), all sharing one weights directory (the
disk transport). What the pool adds:

- **Spreading.** Each ``generate`` call splits the prompt groups over the servers that are *up*, in proportion to
  each one's measured throughput (completions per second over its recent calls, `pool_members.split_by_rate`; equal
  servers take turns), so a slow server gets less and all finish together. A server comes up the first time its
  ``GET /health`` answers (a quick probe before each call) and it serves the pool's model (that of the first server
  that came up).
- **Hedging.** A server whose share is still out long after the others answered theirs (3 times as long and at least
  5 s, or the step's deadline near) has its groups sent again to one that answered; the first answer is taken, the
  other cut off (`pool_dispatch`).
- **Down, and back.** A server is marked down, logged once per reason and counted, when it *fails* (refused
  connection, 5xx), *hangs* (a request or weight push ran out its ``request_timeout``, it did not come to serve the
  trainer's weight version in as long as the pusher's tries could take, its share was still out at the step's
  deadline while the others answered, or it lost its hedge) or serves *another model* (it restarted with one). A
  server that hangs is usually up in every other sense: its ``GET /health`` answers. So a down server gets work again
  only once it answers a *canary*, a one-token completion (`CANARY_TIMEOUT_SECONDS`), sent between two calls, one
  call after it went down and then after 2, 4, ... calls while it fails them (`pool_members.Member`): a server that
  keeps hanging costs a bounded, shrinking share. What a down server lost in its call is retried by the trainer's
  retry rounds on the others.
- **Weights.** `sync_weights` writes each version once; every server is then checked to serve it before it generates
  (`weights.server_sync`), so a server that restarted gets it again (a resync) before it is given work, while the
  others keep generating. A push is bounded by the step's deadline too.
- **Counts.** ``stats`` sums the servers' counters (the keys of `VLLMServerBackend.stats`; its seconds too, so
  ``weight_write_seconds`` is the one write of each version and ``weight_reload_seconds`` the pushes into every
  server) and adds, per server ``k`` (its index in ``base_urls``), ``servers/<k>/requests``, ``servers/<k>/failures``
  (infrastructure failures), ``servers/<k>/completions`` (those taken: an answer that lost its hedge is discarded),
  ``servers/<k>/resyncs``, ``servers/<k>/hangs`` and ``servers/<k>/hedged`` (its shares sent again elsewhere); the
  trainer logs how much each grew per step.

Until a first server has come up, a call waits for one (`HealthWait` over all of them, ``connection_timeout`` in all)
and raises `~maxent_grpo.training.generation.server_client.transport.VLLMServerUnavailableError` when none has, which
stops training as with one server. Once one has been up, a call that finds none up sends nothing: its groups are
retried or dropped, and the trainer stops after ``generation_max_consecutive_empty_batches`` empty batches, as with one
server that died. Every process makes the same backend calls (I7), and the pools of a trainer's processes hold one
verdict on each server: at the start of each call they gather what each saw since the call before, on a process group
of their own (`pool_members.agree`), so a server that hung, failed or serves another model for one process is down for
all of them from that call, and comes back on all of them at once (a hung one only once the pushing process's canary
was answered). Hedges are each process's own: a process whose only share went to a lagging server hedges it on a
server it gave nothing, once the call has lasted 3 times what that share takes at the server's measured rate, and
at least 5 s. The process that pushes the weights (rank 0) loads them, in every call, into every server that is up,
with or without prompts for it, so that another process that sends prompts to a server finds it serving the new
version; one waiting for that version longer than the pusher's tries could take marks the server hung. Every process
must be given the same list of servers.

Unlike vLLM's own data parallelism (one server process, several engines behind one address), the servers of a pool
are independent processes, on one machine or several: one that dies, hangs, slows down or restarts costs its share
of a call, not the run.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import requests
import torch

from maxent_grpo.serving import routes
from maxent_grpo.serving.key_guard import authorization_headers
from maxent_grpo.training.generation.backends.pool_dispatch import Outcome, PoolCall, WrongModel
from maxent_grpo.training.generation.backends.pool_members import Agreement, Member, Report, agree, split_by_rate
from maxent_grpo.training.generation.backends.request_seeds import request_seed
from maxent_grpo.training.generation.backends.vllm_server import (
    CANARY_TIMEOUT_SECONDS,
    ServedModelChanged,
    VLLMServerBackend,
)
from maxent_grpo.training.generation.contract.protocol import Completion, TokenPrompt
from maxent_grpo.training.generation.contract.sampling import SamplingSettings
from maxent_grpo.training.generation.server_client.server_address import same_server
from maxent_grpo.training.generation.server_client.transport import (
    BACKEND_TIMEOUT_SETTING,
    HealthWait,
    VLLMServerRequestError,
)
from maxent_grpo.training.generation.weights.directory import WeightDirectory

logger = logging.getLogger(__name__)

#: Seconds a down server's ``GET /health`` probe may take before each call.
PROBE_TIMEOUT_SECONDS = 2.0
#: The per-server counters in ``VLLMServerPool.stats``, each under ``servers/<k>/<name>``.
SERVER_STAT_NAMES = ("requests", "failures", "completions", "resyncs", "hangs", "hedged")


def _distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _verdict_group() -> Any:
    """The process group the pools of a trainer's processes agree on their verdicts in (`VLLMServerPool._agree`), or
    None with one process. One of their own (gloo, for small Python objects): the gather must never meet the
    trainer's collectives, and a call made ahead (``async_generation``) runs on a thread of its own. Every process
    builds its pool at the same point, so every process makes this group."""
    if not _distributed() or torch.distributed.get_world_size() == 1:
        return None
    return torch.distributed.new_group(backend="gloo")


def _member_sampling(sampling: SamplingSettings, k: int) -> SamplingSettings:
    """Server ``k``'s sampling: with a user seed, server ``k > 0`` draws its request seeds from a seed of its own, so
    that a group's retry on another server never repeats the completions it already has (`request_seeds`)."""
    if k == 0 or sampling.seed is None:
        return sampling
    return replace(sampling, seed=request_seed(sampling.seed, k, -1, 0))


class VLLMServerPool:
    """Generate with several vLLM servers; see the module docstring.

    Args:
        base_urls: the servers' root URLs (at least two, each reaching another server: `server_address`), e.g. ``["http://gen0:8000",
            "http://gen1:8000"]``; a server's index in this list names it in ``stats`` and in log lines.
        weights_directory: the disk transport's directory, which every server must read under the same path; None:
            the servers keep their own weights (off-policy, warned once).
        weight_delta: with ``weights_directory`` given as a path, write each version after the first as a delta
            (`VLLMServerBackend`'s ``weight_delta``); a server that does not hold the version before gets the whole
            version. A `WeightDirectory` given as ``weights_directory`` says so itself.
        api_key: the servers' key (`key_guard`), the same for all of them; None: no key.
        **options: the other arguments of `VLLMServerBackend` (``tokenizer`` and ``sampling`` among them), the same
            for every server; not ``weight_transfer``.

    Raises:
        ValueError: fewer than two URLs, one server named twice, or a ``weight_transfer`` given.
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
        if (twice := same_server(urls)) is not None:
            raise ValueError(f"each server must appear once: {twice[0]!r} and {twice[1]!r} reach the same one")
        if options.get("weight_transfer") is not None:
            # One object would serve every server: the disk transfer pushes to one URL, and a transfer's version is
            # handed from the first server to the others (`_adopt`), which only the pool's own directory supports.
            raise ValueError("a pool takes weights_directory (the disk transfer), not a weight_transfer of its own")
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
        # Each is probed before the first call, then judged by its calls.
        self.members = [Member() for _ in self.servers]
        self._calls = 0
        self._completions = [0] * len(self.servers)
        self._hangs = [0] * len(self.servers)
        self._hedged = [0] * len(self.servers)
        self._told: dict[int, str] = {}  # server -> the reason it is down that was logged
        self._report = Report()  # what this process saw since the call before, for the agreement
        self._group = _verdict_group()
        self._rank = torch.distributed.get_rank() if self._group is not None else 0
        self._model: str | None = None  # the model the pool generates with: the first server's that came up
        self._busy: dict[int, Future[Any]] = {}  # servers whose abandoned call still ends in the background
        self._canaries: dict[int, tuple[Future[str | None], float]] = {}  # server -> its canary, when sent
        self.executor = ThreadPoolExecutor(max_workers=4 * len(self.servers), thread_name_prefix="vllm-pool")
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
        try:
            self._look_before_agreeing()
        except Exception as error:
            # Raised after the agreement, which every process reaches whatever failed here (I7): a process that
            # stopped short of it would leave the others waiting in the gather.
            self._apply(self._agree())
            raise error
        self._apply(self._agree())
        up = [k for k, member in enumerate(self.members) if member.up and k not in self._busy]
        asked = [i for i, count in enumerate(counts) if count > 0]
        if not up and asked:
            logger.warning("no vLLM server of the pool answers: %d prompt(s) not sent", len(asked))
        shares = split_by_rate(
            asked if up else [],
            counts,
            {k: self.members[k].rate for k in up},
            first=self._calls % max(len(up), 1),
            at_least_one=[k for k in up if self.members[k].probe],
        )
        known = [self.members[k].rate for k in up if self.members[k].rate is not None]
        for k in up if asked else []:
            if not shares[k] and known:
                self.members[k].passed_over(max(known))
        # The pusher loads the weights into every server that is up, given work or not: another process judges for
        # itself which servers are up, and one that sends prompts to a server waits for it to serve the version.
        called = up if self._pusher() else [k for k in up if shares[k]]
        if called:
            PoolCall(self, shares, prompts, counts, groups).run(called, spare=[k for k in up if k not in called])
        self._start_canaries()
        return groups

    def _look_before_agreeing(self) -> None:
        """This process's own look at the servers before the processes agree on them: what the calls made in the
        background came to, GET /health of the servers to ask again, and the wait for a first server."""
        self._settle_background()
        fresh = [k for k, member in enumerate(self.members) if member.down_since is None and not member.up]
        # A server that failed loud (refused connections, 5xx) rather than hung is asked by GET /health again, on the
        # canaries' schedule one call later (the call right after its failure, the retry round, goes to the others),
        # then every call until it answers: a process that died and restarted answers it, and a new process is no hung
        # engine. One that answers and fails again waits twice as long each time (`Member.mark_down`).
        failed = [
            k
            for k, member in enumerate(self.members)
            if member.reason == "failed" and member.canary_due(self._calls - 1)
        ]
        # One not answering yet is asked again next call (a refused probe).
        self._report.healthy |= self._healthy(self._probe(fresh + failed))
        if not self._report.healthy and not self._ever_up and not any(member.up for member in self.members):
            self._wait_for_first()

    def cut_off(self, indices: Iterable[int]) -> None:
        """End the calls of the servers of ``indices`` now: nothing more sent, requests in flight cut off."""
        for k in indices:
            self.servers[k].set_deadline(time.monotonic())
            self.servers[k].cancel_requests()

    @property
    def stats(self) -> dict[str, float]:
        """The servers' counters summed (`VLLMServerBackend.stats`' keys) and each server's own (module docstring)."""
        totals: dict[str, float] = {}
        for k, server in enumerate(self.servers):
            counted = dict(server.stats)
            for key, value in counted.items():
                totals[key] = totals.get(key, 0) + value
            mine = (
                counted["requests"],
                counted["infrastructure_failures"],
                self._completions[k],
                counted["weight_resyncs"],
                self._hangs[k],
                self._hedged[k],
            )
            for name, value in zip(SERVER_STAT_NAMES, mine, strict=True):
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

    def finish_staged_weights(self) -> None:
        """Wait for the files of the staged version written behind (`VLLMServerBackend.finish_staged_weights`)."""
        self.servers[0].finish_staged_weights()

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

    @property
    def deadline(self) -> float | None:
        """The step's deadline (`set_deadline`), a `time.monotonic` instant, or None."""
        return self._deadline

    def close(self) -> None:
        """Close every server's connections, cutting off what is still in flight."""
        for server in self.servers:
            server.abandon()
        self.executor.shutdown(wait=False, cancel_futures=True)
        for server in self.servers:
            server.close()

    # ------------------------------------------------------------------------------------------------ internals

    def _pusher(self) -> bool:
        return not _distributed() or torch.distributed.get_rank() == 0

    def member_generate(self, k: int, prompts: list[Any], counts: list[int]) -> list[list[Completion]]:
        """Server ``k``'s ``generate`` (on a pool thread); raises `WrongModel` when it serves another model than the
        pool's."""
        server = self.servers[k]
        try:
            return server.generate(prompts, counts)
        except ServedModelChanged as exc:
            raise WrongModel(exc.served) from exc
        except VLLMServerRequestError as exc:
            served = server.served_models(PROBE_TIMEOUT_SECONDS) if exc.status_code == 404 else None
            if served is not None and self._model is not None and self._model not in served:
                raise WrongModel(served) from exc
            raise

    def answered(self, k: int, completions: int, seconds: float) -> None:
        """Server ``k`` answered its share of this call in full: ``completions`` completions in ``seconds``."""
        self.members[k].measured(completions, seconds)
        self._report.answered.add(k)

    def judge(self, k: int, outcome: Outcome) -> bool | None:
        """What server ``k``'s call says of it (`pool_dispatch`): True when it answered in full, False when it was
        marked down, None when its answer must be discarded (it serves another model)."""
        served = self.servers[k].served_model
        if self._model is None:
            self._model = served
        elif served is not None and served != self._model:
            self.wrong_model(k, [served])
            return None
        if outcome.grew.get("timeouts"):
            self.mark_down(k, "hung", "a request ran out its request_timeout (see the lines above)")
            return False
        if outcome.grew.get("infrastructure_failures"):
            self.mark_down(k, "failed", "an infrastructure failure (see the lines above)")
            return False
        return not outcome.grew.get("out_of_time")

    def count_completions(self, k: int, amount: int) -> None:
        """Count ``amount`` completions taken from server ``k``."""
        with self._lock:
            self._completions[k] += amount

    def count_hedge(self, k: int) -> None:
        """Count a share of server ``k`` sent again to another server."""
        with self._lock:
            self._hedged[k] += 1

    def abandoned(self, k: int, call: Future[Any], cause: str) -> None:
        """Server ``k`` lost its hedge: cut its call off (left to end in the background, its answer discarded) and
        mark it down as hung."""
        self.servers[k].abandon()
        self._busy[k] = call
        self.mark_down(k, "hung", cause)

    def wrong_model(self, k: int, served: list[str]) -> None:
        """Server ``k`` serves ``served``, not the pool's model: marked down until a canary finds the right one."""
        self.servers[k].abandon()
        self.mark_down(
            k,
            "wrong model",
            f"it serves {', '.join(map(repr, served)) or 'no model'}, and the trainer expects {self._model!r}",
        )

    def _settle_background(self) -> None:
        """At a call's start: forget the abandoned calls that have ended, and report the canaries that have."""
        for k, call in list(self._busy.items()):
            if call.done():
                del self._busy[k]
        for k, (canary, sent) in list(self._canaries.items()):
            overdue = time.monotonic() - sent > 2 * CANARY_TIMEOUT_SECONDS  # left behind (it ends by its own bound)
            if not canary.done() and not overdue:
                continue
            del self._canaries[k]
            try:
                self._report.canaries[k] = canary.result() if canary.done() else "no answer"
            except ServedModelChanged as exc:
                self.wrong_model(k, exc.served)
                self._report.canaries[k] = str(exc)

    def _agree(self) -> Agreement:
        """The verdicts of every process's report since the call before (this one's included): a gather on the pool's
        own process group, which every process's pool makes at the start of every call (I7)."""
        report, self._report = self._report, Report()
        if self._group is None:
            return agree([report])
        reports: list[Any] = [None] * torch.distributed.get_world_size(self._group)
        torch.distributed.all_gather_object(reports, report, group=self._group)
        return agree(reports)

    def _apply(self, agreement: Agreement) -> None:
        """Act on ``agreement``, alike on every process: measured servers forget their backoff, canaries bring servers
        back or wait longer, servers seen down by any process are down, healthy ones come up.

        Raises:
            VLLMServerUnavailableError: a process saw no server come up within ``connection_timeout``.
        """
        for k in sorted(agreement.answered):
            self.members[k].answered_in_full()
        for k, cause in sorted(agreement.canaries.items()):
            member = self.members[k]
            if cause is None:
                member.bring_up()
                self._told.pop(k, None)
                self._note_up(k, "it answered a canary, a one-token completion")
                continue
            member.canary_failed(self._calls)
            logger.info(
                "vLLM server %d (%s) is still down (%s): its canary was not answered: %s; next try in %d call(s)",
                k,
                self.base_urls[k],
                member.reason,
                cause,
                member.retry_at - self._calls,
            )
        for k, (reason, cause, rank) in sorted(agreement.down.items()):
            self._down(k, reason, cause if rank == self._rank else f"{cause} (seen by training process {rank})")
        for k in sorted(agreement.healthy - agreement.down.keys()):
            member = self.members[k]
            if not member.up and member.reason in (None, "failed"):  # a hung server's GET /health answers too
                member.bring_up()
                self._note_up(k, "its GET /health answers")
        if agreement.unavailable is not None:
            rank, cause = agreement.unavailable
            raise self._health.error(cause if rank == self._rank else f"training process {rank}: {cause}")

    def _start_canaries(self) -> None:
        """At a call's end, on the pushing process: send a canary to each down server whose time has come, to run
        while the trainer trains (its answer is read at the next call, and told every process there)."""
        if not self._pusher():
            return
        for k, member in enumerate(self.members):
            due = member.canary_due(self._calls + 1) and member.reason != "failed"  # those: GET /health (`generate`)
            if due and k not in self._busy and k not in self._canaries:
                self.servers[k].resume()
                canary = self.executor.submit(self.servers[k].canary, CANARY_TIMEOUT_SECONDS, self._model)
                self._canaries[k] = (canary, time.monotonic())

    def _note_up(self, k: int, why: str) -> None:
        with self._lock:
            again = self.members[k].down_since is not None
            self._ever_up = True
        if again:
            logger.warning(
                "vLLM server %d (%s) answers again (%s): it gets a share of the prompts from this call, once it "
                "serves the training weights",
                k,
                self.base_urls[k],
                why,
            )
        else:
            logger.info("vLLM server %d (%s) is up (%s)", k, self.base_urls[k], why)

    def _wait_for_first(self) -> None:
        """No server has been up yet: poll every server's ``GET /health`` (`HealthWait`'s lines: one warning, then
        one every 30 s) until one answers, within ``connection_timeout`` in all and the step's deadline, and report
        the servers that answer then, or (none came up within ``connection_timeout``) that none did: every process
        stops then (`_apply`)."""
        budget = min(max(self.connection_timeout - self._health.waited(), 0.0), self._time_left())
        health = self._health.wait(budget)
        if isinstance(health, str):
            if self._time_left() > 0:
                self._report.unavailable = health
            return
        self._report.healthy |= self._healthy(self._probe(list(range(len(self.servers)))))

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
                return requests.get(f"{self.base_urls[k]}{routes.HEALTH}", headers=self._headers, timeout=timeout)
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

    def _healthy(self, statuses: dict[int, int | None]) -> set[int]:
        """The servers of ``statuses`` that answered 200 and serve the pool's model (the first of them to answer sets
        it): they come up once every process found them so (`_apply`). One that serves another model is marked
        down."""
        healthy = set()
        for k in sorted(k for k, status in statuses.items() if status == 200):
            served = self.servers[k].served_models(PROBE_TIMEOUT_SECONDS)
            if served is None:
                continue
            if self._model is None and served:
                self._model = served[0]
            if self._model not in served:
                self.wrong_model(k, served)
                continue
            healthy.add(k)
        return healthy

    def _time_left(self) -> float:
        return math.inf if self._deadline is None else self._deadline - time.monotonic()

    def mark_down(self, k: int, reason: str, cause: str) -> None:
        """Server ``k`` was seen down for ``reason`` in this call: from the next call it gets no work, on any process,
        until it answers a canary (or, one that failed loud, every process's ``GET /health`` probe)."""
        with self._lock:
            self._report.mark_down(k, reason, cause)
            if reason == "hung":
                self._hangs[k] += 1

    def _down(self, k: int, reason: str, cause: str) -> None:
        """Mark server ``k`` down (`Member`), as of the call it was seen in; logged once per reason."""
        self.members[k].mark_down(self._calls - 1, reason)
        told = self._told.get(k) == reason
        self._told[k] = reason
        if not told:
            logger.warning(
                "vLLM server %d (%s) is marked down (%s): %s; its prompts go to the other servers until it answers a "
                "canary (a one-token completion), tried after 1, 2, 4, ... calls",
                k,
                self.base_urls[k],
                reason,
                cause,
            )
