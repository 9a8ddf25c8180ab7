"""Call a tool or an environment method, sync or async, within an optional time limit, never using a late result.

TRL calls tools inline and waits as long as they take; it has no time limit, hence this module. Python cannot stop a
thread, so a sync call with a limit runs on its own daemon thread: past the limit the caller gets `CallTimedOut` and
the thread is left to finish on its own (a daemon thread does not keep the process alive), its result discarded.
Because that thread may still change the object it was called on, a caller must not reuse an environment whose call
timed out. A coroutine function runs on the trainer's event loop (TRL's daemon loop for async tools and rewards);
with a limit it is cancelled when the limit passes, and its result is not waited for past it (even when the
coroutine blocks the loop).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
from collections.abc import Callable
from typing import Any


class CallTimedOut(TimeoutError):
    """A bounded call ran past its time limit; its result, if it ever comes, is discarded."""


def bounded_call(
    function: Callable[..., Any],
    kwargs: dict[str, Any],
    *,
    timeout: float | None,
    loop: asyncio.AbstractEventLoop | None,
) -> Any:
    """``function(**kwargs)``, or `CallTimedOut` once ``timeout`` seconds have passed (None: wait for it).

    A coroutine function needs ``loop``, a running event loop on another thread. Whatever ``function`` raises is
    raised here.
    """
    if inspect.iscoroutinefunction(function):
        if loop is None:
            raise RuntimeError(f"{function.__name__} is async but no event loop runs async tools.")
        if timeout is None:
            return asyncio.run_coroutine_threadsafe(function(**kwargs), loop).result()
        future = asyncio.run_coroutine_threadsafe(_within(function(**kwargs), timeout), loop)
        try:  # bounded here too: a coroutine that blocks the loop (a sync call inside it) keeps `_within` from firing
            timed_out, value = future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            timed_out, value = True, None
        if timed_out:
            raise CallTimedOut(f"{function.__name__} took longer than {timeout} s")
        return value
    if timeout is None:
        return function(**kwargs)
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = function(**kwargs)
        except BaseException as error:  # handed to the caller below
            outcome["error"] = error

    worker = threading.Thread(target=run, name=f"bounded-{function.__name__}", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise CallTimedOut(f"{function.__name__} took longer than {timeout} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


async def _within(coroutine: Any, timeout: float) -> tuple[bool, Any]:
    """(True, None) when ``coroutine`` (then cancelled) outlasts ``timeout``, else (False, its value)."""
    task = asyncio.ensure_future(coroutine)
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        task.cancel()
        return True, None
    return False, task.result()
