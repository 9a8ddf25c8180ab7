"""Versioned weights on a vLLM server through a shared directory (the disk transport), pushed again when it restarts.

`ServerWeightSync.write` saves the training weights as a new version (`WeightDirectory`, written atomically): in two
steps, `stage` (the files, while a generation call from the version before may still be in flight) and `publish` (the
trainer's version from then on; older versions removed, once it is written). With ``write_behind`` the files of a
`stage` are written on a thread of their own, behind the training step, until `finish_staged` (before the optimizer
next changes the weights); a push of the version waits for them, within the step's time budget. Only the pushing
process (rank 0) writes, every process walks the parameters (gathering shards is collective under DeepSpeed ZeRO-3 and
FSDP, and so is making a DTensor whole: a model sharded when it was loaded, as FSDP2 runs on CPU, yields its parameters
as DTensors that TRL's walk leaves sharded). The version names the run (a token rank 0 draws and broadcasts) and the
sync count, so a server shared by mistake with another run, or left over from an earlier one, never passes as holding
it.

`ServerWeightSync.ensure`, called before every generation call, makes sure the server serves the trainer's version.
The pusher loads a version it has not pushed yet at once; otherwise it asks the server which version it serves
(``GET /weight_info``, one cheap request), and when that is not the trainer's (a restart brings the launch weights
back) loads it again. A push is ``POST /collective_rpc`` running the worker extension's reload
(`reload_extension`: one engine call between two scheduler steps, so no pause is needed around it; tied layers
included; a report of any engine parameter left stale), ``POST /reset_prefix_cache`` when the engine caches prefixes,
and last ``POST /update_weight_version``: the server claims the version only once all of it has loaded. With a
delta directory (``vllm_weight_delta``) a version is sent as what changed since the one before; a server that does not
hold that one (a restart) gets the whole version instead. Any other process waits until the server claims it, for at
most as long as the pusher's tries could take (``max_attempts`` times ``request_timeout``): a wait that runs that out
is a hang (counted in ``timeouts``), like a push that runs out its ``request_timeout``.
Failures are of two kinds:

- the server cannot be reached (refused connection, timeout): an infrastructure fault; the call generates nothing and
  its groups are retried or dropped like any other missing slots. A push is bounded by ``request_timeout`` and by the
  generation step's deadline like any request (a server whose engine hangs must not hold the step); one cut off
  part-way leaves the server without the version's claim, so it is pushed again;
- the server answers but does not take the weights (the reload failed, or loaded only part of them): tried again with
  backoff within the step's time budget; after ``max_attempts`` refusals in a row `WeightsRefused` stops training.
  A server started without the development endpoints or without the worker extension is refused at once (a
  configuration that retrying cannot fix).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import requests
import torch
from torch.distributed.tensor import DTensor

from maxent_grpo.serving import routes
from maxent_grpo.serving.reload_extension import DELTA_BASE_MISSING, EXTENSION_QUALNAME
from maxent_grpo.serving.routes import RELOAD_METHOD
from maxent_grpo.training.generation.contract.protocol import GenerationStopped
from maxent_grpo.training.generation.server_client.http_deadline import TRANSIENT_ERRORS, Answer, exchange
from maxent_grpo.training.generation.server_client.transport import is_timeout
from maxent_grpo.training.generation.weights.directory import WeightDirectory
from maxent_grpo.training.generation.weights.transfer import WeightTransfer

logger = logging.getLogger(__name__)

#: ``source(model)``: the model's tensors under the names vLLM loads (checkpoint names), each once.
WeightSource = Callable[[torch.nn.Module], Iterable[tuple[str, torch.Tensor]]]

# A version check is one small answer: it gets at most this long, whatever ``request_timeout`` allows.
_VERSION_TIMEOUT_SECONDS = 10.0
_WAIT_POLL_SECONDS = 0.2
_SLOW_WRITE_SECONDS = 60.0  # a push that has waited this long for its version's files says so, once
_REFUSED_SUFFIX = ".refused"
_RESET_ATTEMPTS, _RESET_PAUSE_SECONDS = 5, 0.2
_SERVER_HINT = (
    "start the server with VLLM_SERVER_DEV_MODE=1 and --worker-extension-cls "
    f"{EXTENSION_QUALNAME} (`maxent-grpo vllm-serve` does both)"
)


class WeightsRefused(GenerationStopped):
    """The vLLM server keeps refusing the training weights: generating from it would be off-policy."""


class WeightsNotWritten(GenerationStopped):
    """The training weights could not be written for the server: generating from it would be off-policy."""


def parameters(model: torch.nn.Module) -> Iterable[tuple[str, torch.Tensor]]:
    """The default `WeightSource`: ``model.named_parameters()`` (tied weights once)."""
    return model.named_parameters()


def _whole(named_tensors: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
    """Each tensor whole: a DTensor is gathered (a collective: every process walks the same tensors)."""
    for name, tensor in named_tensors:
        yield name, tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def _from_pusher(value: str | None) -> str | None:
    """Rank 0's ``value`` on every process (a collective)."""
    box = [value]
    if _distributed() and torch.distributed.get_world_size() > 1:
        torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


def _distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _shared_token() -> str:
    """A token for this run, the same on every process (drawn on rank 0 and broadcast: a collective)."""
    box = [uuid.uuid4().hex[:12]]
    if _distributed() and torch.distributed.get_world_size() > 1:
        torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


class ServerWeightSync(WeightTransfer):
    """The disk transfer: the weight versions of one trainer process on one vLLM server; see the module docstring.

    Args:
        base_url: the server's root URL.
        session: the HTTP session to use.
        directory: where versions are written; the server must read it under the same path.
        source: the training model's tensors under vLLM's names (`WeightSource`).
        request_timeout: seconds one request may take (the reload included).
        max_attempts: pushes tried per call, and refusals in a row that stop training.
        backoff: ``backoff(k)`` sleeps before the k+1-th try.
        time_left: seconds left of the generation step's budget (infinite without one).
        count: ``count(stat, amount=1)`` adds ``amount`` to the backend's stat (``timeouts`` for a push given up on
            its timeout; ``weight_write_seconds`` and ``weight_reload_seconds``, the seconds each `stage` and each
            push took).
        cancelled: whether the call was abandoned (a server pool gave its groups to another server): nothing more is
            sent, and a wait for another process's push ends.
        before_push: called before each push; it raises to stop the push (the server restarted serving another
            model, into which the training weights would not load).
        write_behind: `stage` writes the files on a thread of its own and returns once it has walked the weights:
            only where the walk yields the model's live parameters (no ZeRO-3 or FSDP gather, no PEFT merge) and
            nothing changes them before `finish_staged`.
    """

    def __init__(
        self,
        base_url: str,
        session: requests.Session,
        directory: WeightDirectory,
        *,
        source: WeightSource,
        request_timeout: float,
        max_attempts: int,
        backoff: Callable[[int], None],
        time_left: Callable[[], float],
        count: Callable[..., None],
        cancelled: Callable[[], bool] = lambda: False,
        before_push: Callable[[], None] = lambda: None,
        write_behind: bool = False,
    ) -> None:
        self.base_url = base_url
        self.session = session
        self.directory = directory
        self.source = source
        self.request_timeout = request_timeout
        self.max_attempts = max_attempts
        self._backoff = backoff
        self._time_left = time_left
        self._count = count
        self._cancelled = cancelled
        self._before_push = before_push
        self.write_behind = write_behind
        self._behind: str | None = None  # the version `stage` is writing behind, until `finish_staged`
        self._walk_seconds = 0.0  # of the last `stage`'s walk (the files, when they were not written behind)
        self._behind_problem: str | None = None  # what went wrong on the pusher while a write behind was started
        self._counted: str | None = None  # the last version whose write was counted
        self._write_lock = threading.Lock()
        self.pusher = not _distributed() or torch.distributed.get_rank() == 0
        self.version: str | None = None
        self._token: str | None = None
        self._writes = 0
        self._pushed: set[str] = set()
        self._refusals = 0
        self._refused: GenerationStopped | None = None
        self._staged: str | None = None
        self._told_delta_cost = False
        #: Seconds the last `stage` took (the walk and, on the pusher, the files), and the parts of the last push.
        self.write_seconds = 0.0
        self.push_seconds: dict[str, float] = {}

    def write(self, model: torch.nn.Module) -> None:
        """Save ``model``'s weights as the next version and make it the trainer's (`stage`, then `publish`; never
        behind)."""
        self._stage(model, behind=False)
        self.publish()

    def stage(self, model: torch.nn.Module) -> None:
        """Save ``model``'s weights as the next version, without making it the trainer's yet (call it on every
        process: the walk may be collective). A call in flight meanwhile still generates from the version before,
        whose files stay until `publish`. With ``write_behind`` the files are written on a thread of their own:
        ``model`` must not change until `finish_staged`.

        Raises `WeightsNotWritten` on every process when the pusher could not write them (a full disk, a directory it
        may not write to): every process still walks all the weights, so none is left waiting in a gather.
        """
        self._stage(model, behind=self.write_behind)

    def finish_staged(self) -> None:
        """Wait for the files `stage` writes behind (``write_behind``; nothing to do otherwise). Call it on every
        process before the optimizer next changes the weights.

        Their seconds count as ``weight_write_seconds`` once: where a push of the version first waited for them (the
        step that pushes it logs its write), else here.

        Raises `WeightsNotWritten` on every process when the pusher could not write them.
        """
        version, self._behind = self._behind, None
        if version is None:
            return
        problem, seconds = self._behind_problem, self._walk_seconds
        if self.pusher and problem is None:
            try:
                seconds += self.directory.wait_written(version) or 0.0
            except Exception as error:
                problem = self._write_problem(version, error)
        problem = _from_pusher(problem)
        if problem is not None:
            self._staged = None
            raise WeightsNotWritten(problem)
        self._count_write(version, seconds)

    def _stage(self, model: torch.nn.Module, behind: bool) -> None:
        self.finish_staged()  # one write at a time
        if self._token is None:
            self._token = _shared_token()
        self._writes += 1
        version = f"{self._writes}-{self._token}"
        problem: str | None = None
        began = time.perf_counter()
        with torch.no_grad():
            tensors = _whole(self.source(model))
            if self.pusher:
                try:
                    if behind:
                        self.directory.write_behind(version, list(tensors))
                    else:
                        self.directory.write(version, tensors)
                except Exception as error:  # every process must hear of it, or the others wait in a gather
                    problem = self._write_problem(version, error)
            for _ in tensors:  # take part in the gathers of a sharded model (the rest of them, after a failure)
                pass
        self._walk_seconds = time.perf_counter() - began
        if behind:  # its problems are heard of on every process in `finish_staged`
            self._staged = self._behind = version
            self._behind_problem = problem
            return
        problem = _from_pusher(problem)
        if problem is not None:
            raise WeightsNotWritten(problem)
        self._staged = version
        self._count_write(version, self._walk_seconds)

    def _write_problem(self, version: str, error: Exception) -> str:
        return f"could not write weight version {version!r} to {self.directory.root}: {type(error).__name__}: {error}"

    def _count_write(self, version: str, seconds: float) -> None:
        """Count ``seconds`` as the write of ``version``, once (a push and `finish_staged` may both get there)."""
        with self._write_lock:
            if version == self._counted:
                return
            self._counted = version
        self.write_seconds = seconds
        self._count("weight_write_seconds", seconds)
        if self.pusher and self.directory.delta is not None and not self._told_delta_cost:
            self._told_delta_cost = True
            logger.info(
                "vllm_weight_delta: this process keeps a host copy of the pushed weights (%.1f MB), and so does "
                "each worker of each vLLM server (one per tensor-parallel rank)",
                self.directory.delta_bytes / 1e6,
            )

    def publish(self) -> None:
        """Make the version `stage` wrote the trainer's: the server must serve it before it generates. Call it when
        no call of this process is in flight (the pusher removes the older versions; once it is written, for a
        version written behind, on the thread that writes it)."""
        version, self._staged = self._staged, None
        if version is None:
            return
        self.version = version
        if self.pusher:
            self.directory.keep_only_once_written(version)

    def adopt(self, version: str) -> None:
        """Take ``version``, written into the same directory by another `ServerWeightSync` of this process, as the
        trainer's version: this server must serve it before it generates."""
        self.version = version

    def ensure(self, wait: bool = True) -> bool:
        """Whether the server serves the trainer's version, once the pusher has pushed it if needed.

        False when the server cannot be reached or (on another process) has not come to serve it in time: generate
        nothing then. With ``wait`` False (a call with no prompt, made so that the pusher pushes for the processes
        that have prompts) another process returns True at once. Raises `WeightsRefused` when the server keeps
        refusing the weights.
        """
        if self.version is None:  # nothing written yet: the server's launch weights are the model's
            return True
        if self.pusher and self.version not in self._pushed:  # a new version: no server can be serving it yet
            return self._push(None)
        if not (self.pusher or wait):
            return True
        served = self.served_version()
        if served == self.version:
            return True
        if served is None:
            return False
        if not self.pusher:
            return self._wait_for_version()
        return self._push(served)

    def still_serves(self) -> bool:
        """Whether the server still serves the trainer's version (checked after a generation call, whose completions
        are in hand: the check gets its own time, even once the step's time budget is spent)."""
        return self.version is None or self.served_version(within_step=False) == self.version

    def served_version(self, within_step: bool = True) -> str | None:
        """The version the server claims (``"default"`` for its launch weights); None when it cannot be reached (in
        the step's time budget, unless ``within_step`` is False)."""
        try:
            answer = self._exchange("GET", routes.WEIGHT_INFO, None, _VERSION_TIMEOUT_SECONDS, within_step=within_step)
        except TRANSIENT_ERRORS:
            return None
        if answer.status == 404:
            raise WeightsRefused(
                f"the vLLM server at {self.base_url} has no GET /weight_info, so it cannot be given the training "
                f"weights: {_SERVER_HINT}"
            )
        if answer.status != 200:
            logger.info("GET %s/weight_info answered HTTP %d: %s", self.base_url, answer.status, answer.text(200))
            return None
        try:
            return str(answer.json()["weight_version"])
        except (ValueError, KeyError, TypeError):
            logger.info("GET %s/weight_info answered without a weight_version: %s", self.base_url, answer.text(200))
            return None

    # ------------------------------------------------------------------------------------------------ internals

    def _exchange(
        self, method: str, path: str, payload: dict[str, Any] | None, timeout: float, within_step: bool = True
    ) -> Answer:
        """One request, ended by ``timeout`` seconds or (``within_step``) the step's deadline; raises
        `TRANSIENT_ERRORS` (also when the step's time budget is already spent)."""
        left = min(timeout, self._time_left()) if within_step else timeout
        if left <= 0:
            raise requests.Timeout("the generation step's time budget is spent")
        if self._cancelled():
            raise requests.ConnectionError("the call was abandoned")
        try:
            return exchange(self.session, method, f"{self.base_url}{path}", payload, time.monotonic() + left)
        except TRANSIENT_ERRORS as exc:
            logger.info("%s %s%s failed: %s: %s", method, self.base_url, path, type(exc).__name__, exc)
            raise

    def _wait_for_version(self) -> bool:
        """Poll until the server claims the trainer's version (pushed by another process); False when it cannot be
        reached, the pusher gave up on it, or the pusher's tries could have ended. A wait that runs out that bound
        (not the step's deadline) counts as a timeout: the server answers ``GET /weight_info`` but took no push in all
        that time, so it hangs."""
        began = time.monotonic()
        deadline = began + min(self._time_left(), self.max_attempts * self.request_timeout)
        while not self._cancelled():
            served = self.served_version()
            if served == self.version:
                return True
            if served is None or served == f"{self.version}{_REFUSED_SUFFIX}":
                return False
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if self._time_left() > 0:
                    self._count("timeouts")
                logger.warning(
                    "the vLLM server at %s still serves weight version %r, not %r, after %.1f s: not generating from "
                    "it",
                    self.base_url,
                    served,
                    self.version,
                    time.monotonic() - began,
                )
                return False
            time.sleep(min(_WAIT_POLL_SECONDS, remaining))
        return False

    def _push(self, served: str | None) -> bool:
        """Push the trainer's version (``served``: what the server said it serves, None when not asked); the seconds
        it took, every try and the backoff between them included, are added to ``weight_reload_seconds``."""
        if not self._files_written():
            return False
        began = time.perf_counter()
        try:
            return self._push_tries(served)
        finally:
            self._count("weight_reload_seconds", time.perf_counter() - began)

    def _files_written(self) -> bool:
        """Wait until the files of the trainer's version are written, where `stage` writes them behind (within the
        step's time budget, while the call is not abandoned); whether they are."""
        version = self.version
        assert version is not None
        began, told = time.monotonic(), False
        while True:
            if not told and time.monotonic() - began > _SLOW_WRITE_SECONDS:
                told = True
                logger.warning(
                    "weight version %r: its files are still being written after %.0f s", version, _SLOW_WRITE_SECONDS
                )
            try:
                written = self.directory.wait_written(version, timeout=_WAIT_POLL_SECONDS)
            except Exception as error:  # `finish_staged` stops training on every process
                logger.warning("weight version %r not pushed to %s: %s", version, self.base_url, error)
                return False
            if written is not None:
                break
            if self._cancelled() or self._time_left() <= 0:
                logger.warning(
                    "weight version %r not pushed to %s: its files were still being written when the call ended",
                    version,
                    self.base_url,
                )
                return False
        if version == self._behind:
            self._count_write(version, self._walk_seconds + written)
        return True

    def _push_tries(self, served: str | None) -> bool:
        """`_push`'s tries, up to ``max_attempts`` within the step's time budget."""
        if self._refused is not None:
            raise self._refused
        version = self.version
        assert version is not None
        self._before_push()
        if version in self._pushed:
            self._count("weight_resyncs")
            logger.warning(
                "the vLLM server at %s serves weight version %r, not %r (restarted?): pushing %r again",
                self.base_url,
                served,
                version,
                version,
            )
        cause, timed_out = "not tried: the generation step's time budget is spent", False
        for attempt in range(1, self.max_attempts + 1):
            if attempt > 1:
                self._backoff(attempt - 1)
            if self._time_left() <= 0 or self._cancelled():
                break
            try:
                refusal = self._push_once(version)
            except TRANSIENT_ERRORS as exc:
                if self._cancelled():
                    return False
                cause = f"{type(exc).__name__}: {exc}"
                timed_out = is_timeout(exc) and self._time_left() > 0
                logger.warning("weight push to %s failed (attempt %d): %s", self.base_url, attempt, cause)
                continue
            except LookupError as exc:  # a newer version is written: this one cannot be pushed whole any more
                cause = str(exc)
                break
            if refusal is None:
                self._count("weight_pushes")
                self._pushed.add(version)
                self._refusals = 0
                return True
            self._count("weight_refusals")
            self._refusals += 1
            cause = refusal
            logger.warning("the vLLM server at %s refused weight version %r: %s", self.base_url, version, refusal)
            if self._refusals >= self.max_attempts:
                self._stop(
                    f"the vLLM server at {self.base_url} refused the training weights {self._refusals} times in a "
                    f"row, last: {refusal}"
                )
        if self._cancelled():
            return False
        if timed_out:
            self._count("timeouts")
        logger.warning(
            "infrastructure failure: weight version %r not pushed to %s: %s; not generating from it",
            version,
            self.base_url,
            cause,
        )
        return False

    def _push_once(self, version: str) -> str | None:
        """One push of ``version``; returns why the server refused it, or None. Raises `TRANSIENT_ERRORS`, and
        LookupError when the server needs the whole version and it is no longer held (a newer one is written).

        The reload is sent as a delta when the version is one; a server that does not hold the delta's base (a
        restart) is sent the whole version at once, in the same push. A push cut off part-way (Ctrl-C, sockets cut,
        the step's deadline) leaves the server generating from whatever it loaded, never claiming this version.
        """
        began = time.perf_counter()
        seconds: dict[str, float] = {}
        keep = "1" if self.directory.delta is not None else ""
        path = self.directory.path(version)
        reload = self._reload(path, version, keep)
        if reload.status != 200 and DELTA_BASE_MISSING in reload.text(600):
            logger.info(
                "the vLLM server at %s does not hold the base of delta %r: sending it whole", self.base_url, version
            )
            try:
                whole = self.directory.full_path(version)
            except OSError as error:
                self._stop(f"could not write the whole weights of version {version!r}: {error}", WeightsNotWritten)
            try:
                reload = self._reload(whole, version, keep)
            except requests.ConnectionError:  # the server closes the connection after its error answer
                reload = self._reload(whole, version, keep)
        seconds["reload_request"] = time.perf_counter() - began
        refusal, report = self._reload_problem(reload)
        if refusal is not None:
            return refusal
        seconds |= {f"server_{part}": value for part, value in report.get("seconds", {}).items()}
        if report.get("prefix_caching", True):
            started = time.perf_counter()
            refusal = self._reset_prefix_cache()
            seconds["reset_prefix_cache"] = time.perf_counter() - started
            if refusal is not None:
                return refusal
        started = time.perf_counter()
        claimed = self._exchange("POST", routes.UPDATE_WEIGHT_VERSION, {"new_version": version}, self.request_timeout)
        seconds["claim"] = time.perf_counter() - started
        if claimed.status != 200:
            return f"POST /update_weight_version answered HTTP {claimed.status}: {claimed.text(300)}"
        self.push_seconds = seconds | {"total": time.perf_counter() - began}
        return None

    def _reset_prefix_cache(self) -> str | None:
        """Empty the server's prefix cache (blocks computed from the weights before), or say why it was not emptied.
        vLLM answers ``{"success": false}`` while running requests (another client's) still hold blocks: asked again
        a few times, as they finish."""
        answer = None
        for attempt in range(_RESET_ATTEMPTS):
            if attempt:
                time.sleep(_RESET_PAUSE_SECONDS)
            answer = self._exchange("POST", routes.RESET_PREFIX_CACHE, None, self.request_timeout)
            if answer.status != 200:
                return f"POST /reset_prefix_cache answered HTTP {answer.status}: {answer.text(300)}"
            try:
                if answer.json().get("success", True) is not False:
                    return None
            except (ValueError, AttributeError):
                return None  # an older server answers without a body: it resets or raises
        return (
            f"POST /reset_prefix_cache did not empty the cache after {_RESET_ATTEMPTS} tries (requests still running "
            "on the server hold its blocks): the old weights' cached prefixes would be reused"
        )

    def _reload(self, path: Path, version: str, keep: str) -> Answer:
        """``POST /collective_rpc`` of the extension's reload of ``path``, ended by ``request_timeout`` and the step's
        deadline (a server whose engine hangs must not hold the step: it is pushed again once it answers)."""
        payload = {"method": RELOAD_METHOD, "kwargs": {"weights_path": str(path), "version": version, "keep": keep}}
        return self._exchange("POST", routes.COLLECTIVE_RPC, payload, self.request_timeout)

    def _reload_problem(self, answer: Answer) -> tuple[str | None, dict[str, Any]]:
        """Why the reload's answer refuses the weights (None: taken), and the first worker's report."""
        text = answer.text(600)
        if answer.status == 404 or (RELOAD_METHOD in text and "has no attribute" in text):
            self._stop(f"the vLLM server at {self.base_url} cannot reload weights from a directory: {_SERVER_HINT}")
        if answer.status != 200:
            return f"the reload answered HTTP {answer.status}: {text}", {}
        try:
            reports = answer.json()["results"]
            stale = [name for report in reports for name in report["stale"]]
        except (ValueError, KeyError, TypeError):
            return f"the reload answered without a report: {text}", {}
        if not reports:
            return "the reload answered with no worker's report", {}
        if stale:
            return f"the server's engine received no new weights, or only part of them, for {stale[:8]}", {}
        return None, reports[0]

    def _stop(self, message: str, kind: type[GenerationStopped] = WeightsRefused) -> NoReturn:
        """Give up on this run's weights for good (``kind``: refused, or not written): mark the server (so other
        processes stop waiting) and raise."""
        self._refused = kind(message)
        marker = {"new_version": f"{self.version}{_REFUSED_SUFFIX}"}
        for _ in range(2):  # a server that answered the refusal with an error may close the kept-alive connection
            try:
                self._exchange(
                    "POST", routes.UPDATE_WEIGHT_VERSION, marker, _VERSION_TIMEOUT_SECONDS, within_step=False
                )
                break
            except TRANSIENT_ERRORS as exc:
                logger.info("could not mark the refused version on %s: %s", self.base_url, exc)
        raise self._refused
