"""What a `VLLMServerPool` knows of each of its servers: up or down (and why), when to try a down one again, and how
fast each one generates; and the split of a call's prompt groups that follows from it.

Pure Python, no I/O: the pool's calls feed it what they saw, and with several training processes the pool agrees on
it first (`Report`, `agree`), so that every process holds the same `Member` states.

- **Down, and back.** A server marked down is tried again one call after it went down, then, while it keeps failing,
  after 2, 4, 8, ... calls, at most `MAX_BACKOFF_CALLS`: one that hung or serves another model with a *canary* (the
  pool sends a one-token completion), one that failed loud (refused connections, 5xx) by ``GET /health`` (a process
  that died and restarted answers it). A server that keeps failing costs a bounded, shrinking share of the run.
- **One verdict for all processes.** Each process of a trainer has its own pool, and a server seen hanging (or
  failing, or serving another model) by one of them is down for all of them from the same call: at the start of each
  call every process sends the others a `Report` of what it saw since the call before, and `agree` makes one
  `Agreement` of them, which each process applies alike. A server that hung is back only once the pushing process's
  canary was answered, then on every process at once; one that failed loud once every process's ``GET /health``
  probe answers.
- **Throughput.** Each call that a server answers in full gives its rate, completions per second from the call's start
  to its answer; the pool keeps a moving average (`RATE_MEMORY`). A server that lost a hedge (its groups were answered
  elsewhere first) did not finish its share in the time it had: its rate is at most that share over that time.
- **Shares.** `split_by_rate` gives each group to the server that would finish it first at its rate (the one with the
  least work per rate once the group is added), so that all servers finish together; a server whose rate is not
  known yet is taken to be as fast as the average of the others, and one given no group in a call a quarter faster
  in the next, so that it is measured again before long.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

#: The most calls between two canaries of a server that keeps failing them.
MAX_BACKOFF_CALLS = 32
#: Weight of the latest call in a server's moving-average rate.
RATE_MEMORY = 0.5
#: How much faster a server given no group in a call is taken to be in the next (`Member.passed_over`).
PASSED_OVER_GAIN = 1.25


@dataclass
class Member:
    """One server of a pool.

    Attributes:
        up: given work in the next call.
        down_since: the call in which it was last marked down (None: never).
        reason: why it is down (``"failed"``, ``"hung"``, ``"wrong model"``), None while up.
        retry_at: the first call at which a canary may be sent to it while it is down.
        backoff: calls to wait after the next failed canary.
        rate: completions per second (moving average), None before it has been measured.
        probe: it came back up and has not been measured since: it gets at least one group.
    """

    up: bool = False
    down_since: int | None = None
    reason: str | None = None
    retry_at: int = 0
    backoff: int = 1
    rate: float | None = None
    probe: bool = False

    def mark_down(self, call: int, reason: str) -> bool:
        """Mark it down in call ``call``; whether it was up (so that the caller logs the change once). One that fails
        again after coming back, before it answered a call in full, waits twice as long as the last time."""
        was_up = self.up
        self.up, self.down_since, self.reason = False, call, reason
        if was_up and self.probe:
            self.canary_failed(call)
        elif was_up:
            self.retry_at, self.backoff = call + 1, 2
        return was_up

    def canary_due(self, call: int) -> bool:
        """Whether a canary may be sent to it in call ``call``."""
        return not self.up and self.down_since is not None and call >= self.retry_at

    def canary_failed(self, call: int) -> None:
        """Its canary in call ``call`` was not answered: the next one waits twice as many calls as the last."""
        self.retry_at = call + self.backoff
        self.backoff = min(2 * self.backoff, MAX_BACKOFF_CALLS)

    def bring_up(self) -> None:
        """Give it work again (its canary was answered, or it came up for the first time); its backoff is forgotten
        once it answers a call in full (`answered_in_full`)."""
        self.up, self.reason = True, None
        self.probe = self.down_since is not None

    def answered_in_full(self) -> None:
        """It answered a call in full (on any process): it is measured, and its backoff is forgotten."""
        self.probe, self.backoff = False, 1

    def measured(self, completions: int, seconds: float) -> None:
        """It answered ``completions`` completions in ``seconds`` (on this process: its rate is this process's
        own)."""
        if completions <= 0 or seconds <= 0:
            return
        rate = completions / seconds
        self.rate = rate if self.rate is None else RATE_MEMORY * rate + (1 - RATE_MEMORY) * self.rate

    def passed_over(self, best: float) -> None:
        """It was up and given no group in a call (its rate looked too low for one): it is taken to be a quarter faster
        next time, up to ``best`` (the fastest rate), so that a rate measured once in a bad moment is measured again
        after a few calls, never left to starve the server of work for good."""
        if self.rate is not None:
            self.rate = min(self.rate * PASSED_OVER_GAIN, max(best, self.rate))

    def at_most(self, completions: int, seconds: float) -> None:
        """It had not answered ``completions`` completions after ``seconds``: its rate is below that."""
        if completions <= 0 or seconds <= 0:
            return
        bound = completions / seconds
        self.rate = bound if self.rate is None else min(self.rate, bound)


#: The reasons a server is down for, strongest first. When processes saw a server fail in different ways in one call,
#: the strongest is the verdict (a hang needs a canary to end, a loud failure only a ``GET /health`` answer).
DOWN_REASONS = ("hung", "wrong model", "failed")


@dataclass
class Report:
    """What one process of a pool saw of its servers since the call before (sent to every other process).

    Attributes:
        down: server -> (why, what was seen) for each server it marked down.
        answered: servers that answered one of its calls in full.
        canaries: server -> its canary's outcome, None when it was answered, else why not (only the pushing process
            sends canaries).
        healthy: servers it probed that answered ``GET /health`` and serve the pool's model.
        unavailable: why no server came up within ``connection_timeout``, or None.
    """

    down: dict[int, tuple[str, str]] = field(default_factory=dict)
    answered: set[int] = field(default_factory=set)
    canaries: dict[int, str | None] = field(default_factory=dict)
    healthy: set[int] = field(default_factory=set)
    unavailable: str | None = None

    def mark_down(self, k: int, reason: str, cause: str) -> None:
        """Server ``k`` is down for ``reason`` (a stronger reason seen before in the same call stays)."""
        seen = self.down.get(k)
        if seen is None or DOWN_REASONS.index(reason) < DOWN_REASONS.index(seen[0]):
            self.down[k] = (reason, cause)


@dataclass(frozen=True)
class Agreement:
    """The verdicts every process of a pool applies alike (`agree`).

    Attributes:
        down: server -> (why, what was seen, the process that saw it), the strongest reason seen.
        answered: servers some process's call answered in full.
        canaries: server -> its canary's outcome (None: answered).
        healthy: servers every process's ``GET /health`` probe found answering, serving the pool's model.
        unavailable: (process, why) when a process saw no server come up in time: every process stops.
    """

    down: dict[int, tuple[str, str, int]]
    answered: frozenset[int]
    canaries: dict[int, str | None]
    healthy: frozenset[int]
    unavailable: tuple[int, str] | None


def agree(reports: Sequence[Report]) -> Agreement:
    """One `Agreement` of the processes' ``reports`` (in process order, at least one): a server any process marked
    down is down (for the strongest reason seen), one that answered any process in full was measured, and one probed
    is healthy only when every process found it so (every process probes the same servers: their `Member` states
    are the same)."""
    down: dict[int, tuple[str, str, int]] = {}
    for rank, report in enumerate(reports):
        for k, (reason, cause) in report.down.items():
            if k not in down or DOWN_REASONS.index(reason) < DOWN_REASONS.index(down[k][0]):
                down[k] = (reason, cause, rank)
    healthy = frozenset.intersection(*(frozenset(report.healthy) for report in reports))
    unavailable = next(
        ((rank, report.unavailable) for rank, report in enumerate(reports) if report.unavailable is not None), None
    )
    return Agreement(
        down=down,
        answered=frozenset().union(*(report.answered for report in reports)),
        canaries={k: outcome for report in reports for k, outcome in report.canaries.items()},
        healthy=healthy,
        unavailable=unavailable,
    )


def split_by_rate(
    indices: Sequence[int],
    counts: Sequence[int],
    rates: dict[int, float | None],
    *,
    first: int = 0,
    at_least_one: Sequence[int] = (),
) -> dict[int, list[int]]:
    """Give each prompt group of ``indices`` (``counts[i]`` completions asked for group ``i``) to one server of
    ``rates`` (server -> completions per second, None: not known yet), so that they finish together.

    Each group goes, in order, to the server whose work per rate is least once the group is added; ties go to the
    server after ``first`` in the order of ``rates`` (a pool turns ``first`` from call to call, so equal servers take
    turns). The servers of ``at_least_one`` (back up, not measured yet) are each given one group first, while groups
    last.

    Returns:
        server -> the groups it is given, in order (every server of ``rates`` a key, maybe with no group).
    """
    servers = list(rates)
    shares: dict[int, list[int]] = {k: [] for k in servers}
    if not servers:
        return shares
    known = [rate for rate in rates.values() if rate is not None and rate > 0]
    default = sum(known) / len(known) if known else 1.0
    speed = {k: rate if rate is not None and rate > 0 else default for k, rate in rates.items()}
    order = {k: (n - first) % len(servers) for n, k in enumerate(servers)}
    load = dict.fromkeys(servers, 0.0)
    pending = list(indices)
    for k in at_least_one:
        if k in shares and pending:
            i = pending.pop(0)
            shares[k].append(i)
            load[k] += counts[i]
    for i in pending:
        k = min(servers, key=lambda s: ((load[s] + counts[i]) / speed[s], order[s]))
        shares[k].append(i)
        load[k] += counts[i]
    for k in shares:
        shares[k].sort()
    return shares
