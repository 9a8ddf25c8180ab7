"""Sync reward function calls that can be left behind at their timeout, with a bound on how many are left running.

Python cannot interrupt a thread, and a reward function may hold state (a loaded verifier, a client session, the
trainer's environments) that another process could not share, so a sync call with a timeout runs in a daemon thread
of its own: the trainer waits up to the timeout, then counts the call as timed out and goes on. The late call keeps
running until it returns; its result is never used and what it logs (``log_extra``, ``log_metric``) after the
timeout is ignored. At most `MAX_CALLS_LEFT_RUNNING` calls of one reward function are left running: while that many
are still running, a further call of that function fails at once, as timed out, instead of starting another thread.
So a trainer holds at most ``MAX_CALLS_LEFT_RUNNING`` extra threads per reward function, however often it hangs.
Daemon threads do not keep the process alive: Ctrl-C, or the end of the run, ends them with it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

#: Calls of one reward function that may still be running past their timeout before further calls fail at once.
MAX_CALLS_LEFT_RUNNING = 4


class CallTimedOut(TimeoutError):
    """A reward function call took longer than ``reward_timeout`` (or could not start: too many still running)."""


def _run(future: Future, func: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    try:
        future.set_result(func(**kwargs))
    except BaseException as error:  # handed to the waiting caller, which raises it
        future.set_exception(error)


class ThreadedCalls:
    """Runs one reward function's sync calls in daemon threads, each bounded by a timeout; see the module docstring.

    Args:
        name: the reward function's name, for messages and thread names.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._left_running: list[threading.Thread] = []

    @property
    def left_running(self) -> int:
        """Calls of this function still running past their timeout."""
        self._left_running = [thread for thread in self._left_running if thread.is_alive()]
        return len(self._left_running)

    def call(self, func: Callable[..., Any], kwargs: dict[str, Any], timeout: float) -> Any:
        """``func(**kwargs)``'s result, or its error, within ``timeout`` seconds.

        Raises:
            CallTimedOut: the call did not return in time (it is left running), or `MAX_CALLS_LEFT_RUNNING` earlier
                calls are still running (no call is started).
        """
        if self.left_running >= MAX_CALLS_LEFT_RUNNING:
            raise CallTimedOut(
                f"{MAX_CALLS_LEFT_RUNNING} earlier calls of reward function {self.name} are still running past "
                "reward_timeout; not starting another"
            )
        future: Future = Future()
        thread = threading.Thread(target=_run, args=(future, func, kwargs), name=f"reward-{self.name}", daemon=True)
        thread.start()
        try:
            result = future.result(timeout)
        except TimeoutError:
            if future.done():  # the function's own TimeoutError
                thread.join()
                raise
            self._left_running.append(thread)
            raise CallTimedOut(f"reward function {self.name} took longer than reward_timeout={timeout:g}s") from None
        except Exception:  # the function's own error: its thread is ending (Ctrl-C is not waited for)
            thread.join()
            raise
        thread.join()
        return result
