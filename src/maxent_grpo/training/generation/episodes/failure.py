"""Why an episode cannot count: its completion slot is missing, retried from the start, dropped if still missing."""

from __future__ import annotations

from typing import Literal

#: The place an episode failed, a tool or environment call ("tool") or the generation backend in one of its turns.
FailureCause = Literal["tool", "backend"]


class EpisodeFailed(Exception):
    """An episode failed (a call past ``tool_timeout``, a raising ``reset``, a raising tool under
    ``tool_error_policy="retry"``, a backend fault in any turn).

    Attributes:
        cause: "tool" or "backend" (they are counted apart).
        abandoned: a call on the episode's environment is still running (it timed out): the instance is not reused.
    """

    def __init__(self, reason: str, *, cause: FailureCause, abandoned: bool = False) -> None:
        super().__init__(reason)
        self.cause = cause
        self.abandoned = abandoned
