"""One `VLLMServerPool` call: each server's share sent at once, hedged when a server lags, each group from one answer.

`PoolCall.run` sends every called server its share (`split_by_rate`) on the pool's threads and takes the answers as
they come. The servers still out are *hedged* when the call has lasted `HEDGE_AFTER` times as long as it should (at
least `HEDGE_MIN_SECONDS`), or the step's deadline is nearer than twice that: each lagging server's groups are sent
again, whole, to one server that is free (the fastest of those that answered, or were up and given nothing in this
call). How long the call should last is the slowest full answer so far; before any (a process whose only share went to
the lagging server), what the lagging shares take at their servers' measured rates. Whichever of the two answers first
is taken for all of those groups, and the other is cut off (`VLLMServerBackend.abandon`): completions from both never
meet in one group, and each server draws its own request seeds, so a hedge never repeats the completions of the
request it stands in for. A lagging server that loses its hedge is marked down as hung, its call left to end in the
background (`VLLMServerPool`'s busy servers): whatever it answers late is discarded, never counted.

What each server's call tells the pool (`VLLMServerPool.judge`): a request given up on its own ``request_timeout``, a
wait for the weight version another process pushes that ran out its bound (`weights.server_sync`), or a share still
out at the step's deadline while other servers answered, is a hang; any other infrastructure failure a failure; a
configuration error naming the model (404) while the server now serves another model, a wrong model. Each marks the
server down for that reason, from the next call on every training process (`pool_members.agree`).

A call knows its pool only as a `Pool`: what it asks of it, which `VLLMServerPool` provides; the pool imports the
call, never the other way round.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from dataclasses import dataclass
from typing import Any, Protocol

from maxent_grpo.training.generation.backends.pool_members import Member
from maxent_grpo.training.generation.backends.vllm_server import VLLMServerBackend
from maxent_grpo.training.generation.contract.protocol import Completion
from maxent_grpo.training.generation.server_client.transport import VLLMServerUnavailableError

#: A lagging server's groups are sent again once the call has lasted this many times the slowest full answer so far.
HEDGE_AFTER = 3.0
#: The fewest seconds before a hedge, since a call's own jitter, or one server's weight reload taking longer than
#: another's, is no lag (a server that loses its hedge is marked down).
HEDGE_MIN_SECONDS = 5.0
#: Seconds a hedge that lost, once cut off, is waited for before the call returns.
CUT_OFF_WAIT_SECONDS = 2.0


@dataclass(frozen=True)
class Outcome:
    """What one server's call returned, and the counters of that server it moved.

    Attributes:
        groups: one group per prompt index sent.
        grew: ``VLLMServerBackend.stats`` keys that grew during the call, with how much.
        seconds: from the pool call's start to this answer.
    """

    groups: list[list[Completion]]
    grew: dict[str, float]
    seconds: float


class WrongModel(RuntimeError):
    """A member answered that it does not serve the model the pool generates with (raised on the member's thread)."""

    def __init__(self, served: list[str]) -> None:
        super().__init__(", ".join(map(repr, served)) or "no model")
        self.served = served


class Pool(Protocol):
    """What a `PoolCall` asks of its pool (`VLLMServerPool`'s members of these names): the servers, their standing
    (`Member`) and the threads their calls run on; the step's deadline and the cutting off of calls; each server's
    ``generate``; and where the call reports what it saw (answers, completions, hedges, servers down)."""

    @property
    def servers(self) -> Sequence[VLLMServerBackend]: ...

    @property
    def members(self) -> Sequence[Member]: ...

    @property
    def executor(self) -> Executor: ...

    @property
    def deadline(self) -> float | None: ...

    def set_deadline(self, deadline: float | None) -> None: ...

    def cut_off(self, indices: Iterable[int]) -> None: ...

    def member_generate(self, k: int, prompts: list[Any], counts: list[int]) -> list[list[Completion]]: ...

    def judge(self, k: int, outcome: Outcome) -> bool | None: ...

    def answered(self, k: int, completions: int, seconds: float) -> None: ...

    def count_completions(self, k: int, amount: int) -> None: ...

    def count_hedge(self, k: int) -> None: ...

    def abandoned(self, k: int, call: Future[Any], cause: str) -> None: ...

    def wrong_model(self, k: int, served: list[str]) -> None: ...

    def mark_down(self, k: int, reason: str, cause: str) -> None: ...


@dataclass(frozen=True)
class _Send:
    server: int  # who is asked
    indices: list[int]  # which prompts (their groups), in order
    stands_in_for: int | None  # a hedge: the lagging server whose groups these are


class PoolCall:
    """One ``generate`` call of ``pool``: see the module docstring.

    Args:
        pool: the pool (`Pool`).
        shares: server -> the prompt indices it is given.
        prompts: the call's prompts.
        counts: completions asked per prompt.
        groups: where each prompt's group is put.
    """

    def __init__(
        self,
        pool: Pool,
        shares: dict[int, list[int]],
        prompts: Sequence[Any],
        counts: Sequence[int],
        groups: list[list[Completion]],
    ) -> None:
        self.pool = pool
        self.shares = shares
        self.prompts = prompts
        self.counts = counts
        self.groups = groups
        self.start = time.monotonic()
        self.running: dict[Future[Outcome], _Send] = {}
        self.answered: dict[int, float] = {}  # servers that answered their share in full -> seconds taken
        self.finished: dict[int, float] = {}  # servers whose call ended without a failure, share or not -> seconds
        self.idle: list[int] = []  # servers whose call ended without a failure, free for a hedge
        self.hedged: dict[int, Future[Outcome]] = {}  # lagging server -> its hedge
        self.lost: list[Future[Outcome]] = []  # hedges cut off because the server they stood in for answered first
        self.out_of_time: list[int] = []
        self.hedged_because = ""  # why the last hedge was sent, for the line that marks its laggard down

    def run(self, called: list[int], spare: Sequence[int] = ()) -> None:
        """Send each of ``called`` its share, hedge the laggards (on a server that answered, or one of ``spare``: up
        and not called), and fill ``groups``; raise what a server raised that is no failure of its own (the others cut
        off first)."""
        self.idle.extend(spare)
        for k in called:
            self._send(_Send(k, self.shares.get(k, []), None))
        try:
            while self.running:
                done, _ = wait(self.running, timeout=self._until_hedge(), return_when=FIRST_COMPLETED)
                for future in done:
                    self._take(future, self.running.pop(future))
                self._hedge()
        except BaseException:
            for send in self.running.values():
                self.pool.cut_off([send.server])
            wait(self.running, timeout=CUT_OFF_WAIT_SECONDS)
            self.pool.set_deadline(self.pool.deadline)
            raise
        if self.answered or self.finished:  # still out at the deadline while others answered: it hangs
            for k in self.out_of_time:
                self.pool.mark_down(k, "hung", "its requests were still out at the step's deadline while the other "
                                    "servers answered")  # fmt: skip
        wait(self.lost, timeout=CUT_OFF_WAIT_SECONDS)

    # ------------------------------------------------------------------------------------------------ internals

    def _send(self, send: _Send) -> None:
        prompts = [self.prompts[i] for i in send.indices]
        counts = [self.counts[i] for i in send.indices]
        self.pool.servers[send.server].resume()
        future = self.pool.executor.submit(self._call, send.server, prompts, counts)
        self.running[future] = send

    def _call(self, k: int, prompts: list[Any], counts: list[int]) -> Outcome:
        """Server ``k``'s call (on a pool thread)."""
        server = self.pool.servers[k]
        before = dict(server.stats)
        groups = self.pool.member_generate(k, prompts, counts)
        grew = {key: value - before.get(key, 0) for key, value in server.stats.items() if value > before.get(key, 0)}
        return Outcome(groups, grew, time.monotonic() - self.start)

    def _take(self, future: Future[Outcome], send: _Send) -> None:
        k = send.server
        owner = k if send.stands_in_for is None else send.stands_in_for
        try:
            outcome = future.result()
        except VLLMServerUnavailableError as exc:
            self.pool.mark_down(k, "failed", str(exc))
            return
        except WrongModel as exc:
            self.pool.wrong_model(k, exc.served)
            return
        if send.stands_in_for is None and owner in self.hedged:  # the server answered before its hedge
            hedge = self.hedged.pop(owner)
            if hedge in self.running:
                hedger = self.running.pop(hedge).server
                self.pool.servers[hedger].abandon()
                self.lost.append(hedge)
        elif send.stands_in_for is not None:
            if owner not in self.hedged:  # the server answered first: this hedge lost
                return
            del self.hedged[owner]
            lagging = next((f for f, s in self.running.items() if s.server == owner and s.stands_in_for is None), None)
            if lagging is not None:
                self.running.pop(lagging)
                self.pool.members[owner].at_most(sum(self.counts[i] for i in send.indices), outcome.seconds)
                self.pool.abandoned(
                    owner,
                    lagging,
                    f"its share was not answered in {outcome.seconds:.1f} s, {self.hedged_because}: server {k} "
                    "answered it in its place",
                )
        complete = self.pool.judge(k, outcome)
        if complete is None:
            return
        for i, group in zip(send.indices, outcome.groups, strict=True):
            self.groups[i] = group
        self.pool.count_completions(k, sum(len(group) for group in outcome.groups))
        if outcome.grew.get("out_of_time"):
            self.out_of_time.append(k)
        if complete:
            self.idle.append(k)
            self.finished[k] = outcome.seconds
            if send.indices and send.stands_in_for is None:
                self.answered[k] = outcome.seconds
                self.pool.answered(k, sum(len(group) for group in outcome.groups), outcome.seconds)

    def _reference(self) -> tuple[float, str] | None:
        """Seconds the call should last, and why: the slowest full answer so far (else, with no prompt asked, the
        slowest push done); before any, the longest the lagging shares take at their servers' measured rates (a
        server not measured yet as fast as the others on average). None when nothing is known yet."""
        reference = self.answered or self.finished
        if reference:
            return max(reference.values()), "while the others answered theirs in"
        rates = [member.rate for member in self.pool.members if member.rate]
        if not rates:
            return None
        average = sum(rates) / len(rates)
        expected = [
            sum(self.counts[i] for i in send.indices) / (self.pool.members[send.server].rate or average)
            for _, send in self._laggards()
            if send.indices  # a push alone has no rate to take its time from
        ]
        return (max(expected), "while its measured rate says it takes") if expected else None

    def _hedge_at(self) -> float | None:
        """When the laggards are hedged (a `time.monotonic` instant), or None while nothing tells how long the call
        should last (`_reference`)."""
        reference = self._reference()
        if reference is None:
            return None
        seconds = reference[0]
        at = self.start + max(HEDGE_AFTER * seconds, HEDGE_MIN_SECONDS)
        deadline = self.pool.deadline
        return at if deadline is None else min(at, deadline - 2 * seconds)

    def _until_hedge(self) -> float | None:
        """Seconds until a hedge is due, or None while none can be sent (nothing tells how long the call should last,
        no laggard, or no server free to stand in for one)."""
        at = self._hedge_at()
        due = any(not send.indices or any(j != send.server for j in self.idle) for _, send in self._laggards())
        if at is None or not due:
            return None
        return max(at - time.monotonic(), 0.0)

    def _laggards(self) -> list[tuple[Future[Outcome], _Send]]:
        """The servers' own calls still out and not hedged yet (a call without prompts only loads the weights)."""
        return [
            (future, send)
            for future, send in self.running.items()
            if send.stands_in_for is None and send.server not in self.hedged
        ]

    def _hedge(self) -> None:
        at, reference = self._hedge_at(), self._reference()
        if at is None or reference is None or time.monotonic() < at:
            return
        self.hedged_because = f"{reference[1]} {reference[0]:.1f} s"
        for future, send in self._laggards():
            k = send.server
            if not send.indices:  # only loading the weights, for longer than the others took to load and generate
                del self.running[future]
                self.pool.abandoned(
                    k,
                    future,
                    f"its weight push was not done in {time.monotonic() - self.start:.1f} s, while the others had "
                    f"theirs done and answered in {reference[0]:.1f} s",
                )
                continue
            free = [j for j in self.idle if j != k]
            if not free:
                continue
            j = max(free, key=lambda s: (self.pool.members[s].rate or 0.0, -s))
            self.idle.remove(j)
            self.pool.count_hedge(k)
            self._send(_Send(j, send.indices, k))
            self.hedged[k] = next(f for f, s in self.running.items() if s.server == j and s.stands_in_for == k)
