"""The two ways a failing reward function stops a run; each message is one line naming the function."""

from __future__ import annotations


class RewardFunctionError(RuntimeError):
    """A reward function raised an error that another attempt would not fix (a `TypeError` in its code, an HTTP 400):
    the run stops at once. The original error is chained (``__cause__``)."""


class RewardFunctionGone(RuntimeError):
    """Every call of a reward function failed, after its retries, in ``reward_max_consecutive_failed_batches``
    consecutive training generation batches: the scorer is gone, and training on nothing would not say so."""


def one_line(error: BaseException) -> str:
    """``"TypeName: message"`` of ``error`` on one line (its message's first line, at most 200 characters)."""
    lines = str(error).strip().splitlines()
    message = lines[0] if lines else ""
    if len(message) > 200:
        message = message[:197] + "..."
    return f"{type(error).__name__}: {message}" if message else type(error).__name__
