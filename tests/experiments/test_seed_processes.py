"""`map_seeds`: a closure run per seed in forked processes, results in seed order, errors back to the caller."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from maxent_grpo_experiments.seed_processes import map_seeds


def test_results_come_back_in_seed_order_from_other_processes() -> None:
    offset = 100  # a closure: nothing but the seed is sent to a worker

    def job(seed: int) -> tuple[int, int]:
        return seed + offset, os.getpid()

    results = map_seeds(job, [3, 1, 2, 0], workers=2)
    assert [value for value, _ in results] == [103, 101, 102, 100]
    assert os.getpid() not in {pid for _, pid in results}
    assert map_seeds(job, [5], workers=2) == [(105, os.getpid())]  # one seed: in this process
    assert not multiprocessing.active_children()


def test_a_seed_that_raises_ends_the_workers_and_reaches_the_caller() -> None:
    def job(seed: int) -> int:
        if seed == 1:
            raise RuntimeError(f"seed {seed} failed")
        return seed

    with pytest.raises(RuntimeError, match="seed 1 failed"):
        map_seeds(job, [0, 1, 2], workers=2)
    assert not multiprocessing.active_children()
    with pytest.raises(ValueError, match="workers must be at least 1"):
        map_seeds(job, [0], workers=0)
