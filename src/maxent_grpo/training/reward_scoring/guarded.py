"""`guarded`: one reward function's calls bounded by ``reward_timeout`` and retried on transient errors.

Each of TRL's calls of the function gets ``1 + reward_retries`` attempts. An attempt that times out or raises a
transient error (`transient.is_transient`) is followed, after a short backoff (`backoff`), by the next; when none
succeeds, the call returns None for every row, and the ledger marks those rows unscored (they leave the update as
dropped rows do, never as a made-up reward). Any other error stops the run at once: `RewardFunctionError`, one line
naming the function (a `RewardContractError` is raised as it is). An async function's attempt is cancelled at the
timeout; a sync function's attempt runs in a thread of its own that is left behind at the timeout
(`threaded_calls`). Without a timeout a sync function runs in the caller's thread, as in TRL.

A call that is not TRL's (the function called directly, on other arguments) goes through unchanged.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from trl.trainer.utils import is_async_callable

from maxent_grpo.training.reward_contract import RewardContractError
from maxent_grpo.training.reward_scoring.errors import RewardFunctionError, one_line
from maxent_grpo.training.reward_scoring.ledger import CallReport, ScoringLedger
from maxent_grpo.training.reward_scoring.threaded_calls import ThreadedCalls
from maxent_grpo.training.reward_scoring.transient import is_timeout, is_transient

#: Keyword arguments through which a reward function writes to the trainer; a late attempt's writes are ignored.
_WRITERS = ("log_extra", "log_metric")


def backoff(attempt: int) -> float:
    """Seconds to wait after failed attempt ``attempt`` (0-based): 0.1, 0.4, 1.6, then 2 s."""
    return min(0.1 * 4**attempt, 2.0)


@dataclass(frozen=True)
class CallPolicy:
    """How long an attempt may take (seconds, None: no limit) and how many attempts follow a failed one."""

    timeout: float | None
    retries: int


class _Gate:
    """Lets an attempt's writes to the trainer through until the attempt is given up."""

    def __init__(self) -> None:
        self.open = True

    def guard(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        guarded_kwargs = dict(kwargs)
        for key in _WRITERS:
            writer = kwargs.get(key)
            if callable(writer):
                guarded_kwargs[key] = self._gated(writer)
        return guarded_kwargs

    def _gated(self, writer: Callable[..., None]) -> Callable[..., None]:
        def write(*args: Any, **kwargs: Any) -> None:
            if self.open:
                writer(*args, **kwargs)

        return write


#: Added to the error of a reward function that fails on message lists (chat prompts) as if they were strings.
CHAT_COMPLETIONS_HINT = (
    "with chat prompts each completion is a list of messages ([{'role': 'assistant', 'content': ...}]), not a "
    "string: take its text with maxent_grpo.rewards.completion_text(completion), which takes both"
)


def _is_chat(completions: Sequence[Any]) -> bool:
    return any(isinstance(completion, list) for completion in completions)


class _Attempts:
    """The bookkeeping of one call's attempts, shared by the sync and the async wrapper."""

    def __init__(self, name: str, policy: CallPolicy, rows: list[bool], chat: bool) -> None:
        self.name = name
        self.policy = policy
        self.report = CallReport(rows)
        self.chat = chat  # the completions are message lists

    def __iter__(self) -> Iterator[int]:
        for attempt in range(self.policy.retries + 1):
            self.report.attempts = attempt + 1
            yield attempt

    def failed(self, error: Exception, attempt: int) -> float | None:
        """Note a failed attempt: the seconds to wait before the next one, None when none follows. A non-transient
        error is raised (`RewardContractError` as it is, anything else as `RewardFunctionError`)."""
        if isinstance(error, RewardContractError):
            raise error
        if not is_transient(error):
            # A string method on a message dict (AttributeError), a string operation on a list (TypeError).
            hint = f" ({CHAT_COMPLETIONS_HINT})" if self.chat and isinstance(error, AttributeError | TypeError) else ""
            raise RewardFunctionError(f"reward function {self.name} raised {one_line(error)}{hint}") from error
        self.report.errors.append(error)
        self.report.timed_out += is_timeout(error)
        return backoff(attempt) if attempt < self.policy.retries else None


def guarded(
    func: Callable[..., Any],
    index: int,
    name: str,
    policy: CallPolicy,
    ledger: ScoringLedger,
    rows: Callable[[int], Sequence[bool]],
) -> Callable[..., Any]:
    """``func`` (sync or async) with its calls bounded, retried and reported to ``ledger`` as function ``index``.

    Args:
        func: the reward function as TRL calls it (keyword arguments ``prompts``, ``completions``, ...).
        index: its column in the rewards.
        name: its name in messages.
        policy: the timeout and retries.
        ledger: where each call is reported.
        rows: given the call's row count, which of this process's rows the call scores (the kept rows).
    """

    def trl_call(args: tuple, kwargs: dict[str, Any]) -> bool:
        return not args and "completions" in kwargs

    def report(attempts: _Attempts) -> None:
        ledger.record(index, attempts.report)

    if is_async_callable(func):

        @functools.wraps(func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            if not trl_call(args, kwargs):
                return await func(*args, **kwargs)
            num_rows = len(kwargs["completions"])
            attempts = _Attempts(name, policy, list(rows(num_rows)), _is_chat(kwargs["completions"]))
            for attempt in attempts:
                gate = _Gate()
                try:
                    result = await asyncio.wait_for(func(**gate.guard(kwargs)), policy.timeout)
                except Exception as error:  # classified: a non-transient one is raised by `failed`
                    gate.open = False
                    wait = attempts.failed(error, attempt)
                    if wait is not None:
                        await asyncio.sleep(wait)
                    continue
                report(attempts)
                return result
            attempts.report.failed = True
            report(attempts)
            return [None] * num_rows

        return async_wrapper

    threads = ThreadedCalls(name) if policy.timeout is not None else None

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not trl_call(args, kwargs):
            return func(*args, **kwargs)
        num_rows = len(kwargs["completions"])
        attempts = _Attempts(name, policy, list(rows(num_rows)), _is_chat(kwargs["completions"]))
        for attempt in attempts:
            gate = _Gate()
            try:
                if threads is None:
                    result = func(**gate.guard(kwargs))
                else:
                    result = threads.call(func, gate.guard(kwargs), policy.timeout)
            except Exception as error:  # classified: a non-transient one is raised by `failed`
                gate.open = False
                wait = attempts.failed(error, attempt)
                if wait is not None:
                    time.sleep(wait)
                continue
            report(attempts)
            return result
        attempts.report.failed = True
        report(attempts)
        return [None] * num_rows

    return wrapper
