"""Run one function of a seed for several seeds, in forked processes side by side.

A held-out benchmark's seed depends on nothing but its seed (its base model, its RL runs and their sampling are all
seeded by it), so its seeds can run in separate processes with the figures they would have in one. The standard
library's `concurrent.futures.ProcessPoolExecutor` does the work; what it lacks is a way to run a closure (a task's
reward and sampling functions are closures, and a test may replace module attributes) without pickling it: the job is
left in a module global before the processes are forked, and each process is sent only a seed.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

__all__ = ["map_seeds"]

T = TypeVar("T")

_job: Callable[[int], Any] | None = None


def _run(seed: int) -> Any:
    assert _job is not None
    return _job(seed)


def map_seeds(job: Callable[[int], T], seeds: Sequence[int], workers: int) -> list[T]:
    """``job(seed)`` for each seed of ``seeds``, in their order.

    Args:
        job: what to run for a seed; its result must pickle (it comes back from another process).
        seeds: the seeds.
        workers: processes that run seeds side by side (each starts a seed when it has finished one); 1 runs them one
            after the other in this process.

    Returns:
        The results, in the order of ``seeds``.

    Raises:
        ValueError: ``workers`` is below 1.
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    if workers == 1 or len(seeds) <= 1:
        return [job(seed) for seed in seeds]
    global _job
    _job = job
    try:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=min(workers, len(seeds)), mp_context=context) as pool:
            return list(pool.map(_run, seeds))
    finally:
        _job = None
