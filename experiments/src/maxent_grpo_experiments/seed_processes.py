"""Run one function of a seed for several seeds, in forked processes side by side.

A held-out benchmark's seed depends on nothing but its seed (its base model, its RL runs and their sampling are all
seeded by it), so its seeds can run in separate processes with the figures they would have in one. The standard
library's `multiprocessing.pool.Pool` does the work; what it lacks is a way to run a closure (a task's reward and
sampling functions are closures, and a test may replace module attributes) without pickling it: the job is left in a
module global before the processes are forked, and each process is sent only a seed.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch

__all__ = ["map_seeds"]

T = TypeVar("T")

_job: Callable[[int], Any] | None = None


def _start_worker() -> None:
    """A worker runs torch on one thread (the benchmark scripts run on one too; a forked process must not use the
    OpenMP thread pool its parent may have started), and leaves Ctrl-C to its parent, which ends it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)


def _run(seed: int) -> Any:
    assert _job is not None
    return _job(seed)


def map_seeds(job: Callable[[int], T], seeds: Sequence[int], workers: int) -> list[T]:
    """``job(seed)`` for each seed of ``seeds``, in their order.

    With several workers each seed runs in a forked process on one torch thread; the first seed that raises, or a
    Ctrl-C, ends every worker at once and the error reaches the caller.

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
        with context.Pool(min(workers, len(seeds)), initializer=_start_worker) as pool:  # leaving it terminates them
            return pool.map(_run, seeds, chunksize=1)
    finally:
        _job = None
