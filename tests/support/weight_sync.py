"""A `ServerWeightSync` for tests: one try per push, no backoff, no step deadline, counters not kept."""

from __future__ import annotations

from pathlib import Path

import requests

from maxent_grpo.training.generation.weights.directory import WeightDirectory
from maxent_grpo.training.generation.weights.server_sync import ServerWeightSync, WeightSource, parameters


def single_try_sync(
    base_url: str,
    root: Path,
    *,
    session: requests.Session | None = None,
    source: WeightSource = parameters,
    request_timeout: float = 30.0,
    delta: bool = False,
    write_behind: bool = False,
) -> ServerWeightSync:
    """The weight versions of one trainer process on the server at ``base_url``, written under ``root`` (as deltas
    after the first with ``delta``; staged versions on a thread of their own with ``write_behind``)."""
    return ServerWeightSync(
        base_url,
        session or requests.Session(),
        WeightDirectory(root, delta=delta),
        source=source,
        request_timeout=request_timeout,
        max_attempts=1,
        backoff=lambda attempt: None,
        time_left=lambda: float("inf"),
        count=lambda stat, amount=1: None,
        write_behind=write_behind,
    )
