"""Collective retry rounds (I7): every process makes the same backend calls, whatever failed where."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest
import torch
from datasets import Dataset

from maxent_grpo import Completion
from maxent_grpo.collectives import Collectives
from maxent_grpo.training.dynamic_sampling import DynamicSampler
from maxent_grpo.training.generation.collect import collect_completion_groups
from maxent_grpo.training.generation.contract.protocol import GenerationStopped
from maxent_grpo.training.generation.step import GenerationStep


class FlakyBackend:
    """Returns ``short[k]`` completions fewer than asked for on the k-th call (tagged with their prompt)."""

    def __init__(self, short: list[int]) -> None:
        self.short = list(short)
        self.calls: list[list[int]] = []

    def generate(self, prompts: Sequence[str], counts: Sequence[int]) -> list[list[Completion]]:
        self.calls.append(list(counts))
        missing = self.short.pop(0) if self.short else 0
        groups = []
        for prompt, count in zip(prompts, counts, strict=True):
            served = max(count - missing, 0)
            groups.append([Completion(text=prompt, prompt_ids=[1], completion_ids=[2]) for _ in range(served)])
        return groups


def ok(completion: Completion) -> str | None:
    return None


class ThreadCollective:
    """`any_process` across threads standing for processes: a barrier, then the OR of every thread's flag."""

    def __init__(self, parties: int) -> None:
        self.barrier = threading.Barrier(parties)
        self.flags: list[bool] = []
        self.lock = threading.Lock()

    def any_process(self, flag: bool) -> bool:
        with self.lock:
            self.flags.append(flag)
        self.barrier.wait()
        result = any(self.flags)
        self.barrier.wait()
        with self.lock:
            self.flags.clear()
        self.barrier.wait()
        return result


def test_a_process_with_nothing_missing_still_takes_part_in_every_round():
    backend = FlakyBackend([])
    result = collect_completion_groups(
        backend, ["a", "b"], [4, 2], retry_limit=3, check=ok, any_process=lambda f: True
    )
    assert result.complete == [True, True]
    assert backend.calls == [[4, 2], [], [], []]  # the first call, then three rounds with nothing to ask
    assert result.calls == 4 and result.stats["retry_rounds"] == 3 and result.stats["retried_prompts"] == 0


def test_rounds_stop_when_no_process_misses_anything():
    backend = FlakyBackend([1, 1])
    result = collect_completion_groups(backend, ["a"], [4], retry_limit=5, check=ok)
    assert backend.calls == [[4], [1], [1]]  # the third call completes the group: no fourth round
    assert result.complete == [True] and result.stats["retry_rounds"] == 2


@pytest.mark.parametrize(("short_on_first", "short_on_second"), [([2, 2, 2], []), ([], [1]), ([3, 0, 3], [1, 1])])
def test_two_processes_make_the_same_calls_when_faults_hit_one(short_on_first, short_on_second):
    collective = ThreadCollective(2)
    backends = [FlakyBackend(short_on_first), FlakyBackend(short_on_second)]
    results: list = [None, None]

    def run(rank: int, prompts: list[str], counts: list[int]) -> None:
        results[rank] = collect_completion_groups(
            backends[rank], prompts, counts, retry_limit=4, check=ok, any_process=collective.any_process
        )

    threads = [
        threading.Thread(target=run, args=(0, ["a", "b"], [4, 2])),  # b straddles into the second process
        threading.Thread(target=run, args=(1, ["b", "c"], [2, 4])),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert all(r is not None for r in results)
    assert len(backends[0].calls) == len(backends[1].calls)
    assert results[0].stats["retry_rounds"] == results[1].stats["retry_rounds"]
    for result, prompts in zip(results, (["a", "b"], ["b", "c"]), strict=True):
        for prompt, group in zip(prompts, result.groups, strict=True):
            assert all(c.text == prompt for c in group)


def test_the_retry_budget_is_the_group_size_whatever_part_of_a_group_a_process_holds():
    # Process 1 of 2, 3 rows each, groups of 4: it holds one row of group 0 and two rows of group 1.
    backend = FlakyBackend([10] * 10)  # nothing ever comes back
    step = GenerationStep(
        backend,
        check=ok,
        collectives=Collectives(process_index=1, device=torch.device("cpu"), gather=lambda tensor: tensor),
        group_size=4,
        max_retry_rounds=None,
        placeholder_prompt_id=0,
        placeholder_completion_id=1,
    )
    batch = step.collect(["a", "b", "b"])
    assert batch.runs == [range(0, 1), range(1, 3)]
    assert backend.calls == [[1, 2]] + [[1, 2]] * 4  # the first call, then num_generations rounds
    assert batch.stats["retry_rounds"] == 4 and batch.complete == [False, False]


def test_a_spent_time_budget_on_one_process_stops_the_retry_rounds_of_every_process():
    collective = ThreadCollective(2)
    backends = [FlakyBackend([1] * 10), FlakyBackend([1] * 10)]  # every group always comes back one short
    now = time.monotonic()
    deadlines = [now - 1.0, now + 3600.0]  # process 0 is out of time, process 1 is not
    results: list = [None, None]

    def run(rank: int) -> None:
        results[rank] = collect_completion_groups(
            backends[rank],
            ["a"],
            [4],
            retry_limit=4,
            check=ok,
            any_process=collective.any_process,
            deadline=deadlines[rank],
        )

    threads = [threading.Thread(target=run, args=(rank,)) for rank in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert all(r is not None for r in results)
    for backend, result in zip(backends, results, strict=True):
        assert backend.calls == [[4]]  # the first call only, on both processes
        assert result.stats["retry_rounds"] == 0 and result.complete == [False]
        assert "the generation step's time budget was spent" in result.reasons


def test_a_step_hands_its_deadline_to_the_backend_only_while_calling_it():
    class DeadlineBackend(FlakyBackend):
        def __init__(self) -> None:
            super().__init__([])
            self.deadline: float | None = None
            self.seen: list[float | None] = []

        def set_deadline(self, deadline: float | None) -> None:
            self.deadline = deadline

        def generate(self, prompts: Sequence[str], counts: Sequence[int]) -> list[list[Completion]]:
            self.seen.append(self.deadline)
            return super().generate(prompts, counts)

    backend = DeadlineBackend()
    before = time.monotonic()
    step = GenerationStep(
        backend,
        check=ok,
        collectives=Collectives(process_index=0, device=torch.device("cpu"), gather=lambda tensor: tensor),
        group_size=2,
        max_retry_rounds=None,
        placeholder_prompt_id=0,
        placeholder_completion_id=1,
        step_timeout=60.0,
    )
    batch = step.collect(["a", "a"])
    assert batch.complete == [True]
    assert len(backend.seen) == 1 and before + 60.0 <= backend.seen[0] <= time.monotonic() + 60.0
    assert backend.deadline is None  # cleared after the step's calls


def one_process_step(backend, step_timeout: float | None = None) -> GenerationStep:
    return GenerationStep(
        backend,
        check=ok,
        collectives=Collectives.single(),
        group_size=2,
        max_retry_rounds=None,
        placeholder_prompt_id=0,
        placeholder_completion_id=1,
        step_timeout=step_timeout,
    )


def test_refill_rounds_stop_once_the_step_budget_is_spent():
    class BudgetSpendingBackend(FlakyBackend):
        """Complete groups; its first call spends the step's whole time budget."""

        step: GenerationStep

        def generate(self, prompts: Sequence[str], counts: Sequence[int]) -> list[list[Completion]]:
            self.step.deadline = time.monotonic() - 1.0
            return super().generate(prompts, counts)

    backend = BudgetSpendingBackend([])
    step = backend.step = one_process_step(backend, step_timeout=3600.0)
    prompts = ["a", "a", "b", "b"]
    inputs = [{"prompt": prompt} for prompt in prompts]
    sampler = DynamicSampler(
        Dataset.from_dict({"prompt": ["c", "d", "e"]}),
        torch.ones(1),
        metric_column=None,
        max_rounds=3,
        error_at_cap=False,
        seed=0,
    )
    batch = step.collect(prompts)

    def equal_rewards(prompts, rows, agreement, rows_to_score):  # no group has any learning signal
        return torch.zeros(len(rows.keep), 1)

    refilled = step.refill(batch, step.agree(batch), sampler, inputs, equal_rewards, logged_metrics=lambda: False)

    assert refilled.outcome.rounds == 0 and refilled.outcome.generated_groups == 2  # the first batch only
    assert backend.calls == [[2, 2]]  # the first call only: no refill round started past the deadline


class ThreadCollectives:
    """`Collectives` of threads standing for processes: each gather is a barrier, then every thread's part in order."""

    def __init__(self, parties: int) -> None:
        self.barrier = threading.Barrier(parties)
        self.parts: list = [None] * parties

    def _exchange(self, rank: int, part):
        self.barrier.wait()
        self.parts[rank] = part
        self.barrier.wait()
        gathered = list(self.parts)
        self.barrier.wait()
        return gathered

    def of(self, rank: int) -> Collectives:
        return Collectives(
            rank,
            torch.device("cpu"),
            lambda tensor: torch.cat(self._exchange(rank, tensor)),
            lambda values: [value for part in self._exchange(rank, values) for value in part],
        )


def test_a_backend_that_stops_generation_on_one_process_stops_the_step_on_every_process():
    class StoppingBackend(FlakyBackend):
        def generate(self, prompts: Sequence[str], counts: Sequence[int]) -> list[list[Completion]]:
            self.calls.append(list(counts))
            raise GenerationStopped("the server refuses the weights")

    collectives = ThreadCollectives(2)
    backends = [StoppingBackend([]), FlakyBackend([1] * 10)]  # rank 1's groups always come back one short
    errors: list = [None, None]

    def run(rank: int) -> None:
        step = GenerationStep(
            backends[rank],
            check=ok,
            collectives=collectives.of(rank),
            group_size=2,
            max_retry_rounds=2,
            placeholder_prompt_id=0,
            placeholder_completion_id=1,
        )
        try:
            step.collect(["a", "a"])
        except GenerationStopped as error:
            errors[rank] = error

    threads = [threading.Thread(target=run, args=(rank,)) for rank in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads), "a process waited in a collective the other skipped"
    assert [str(error) for error in errors] == ["the server refuses the weights"] * 2
    assert len(backends[0].calls) == len(backends[1].calls) == 3  # the same rounds on both: first call + 2 retries


def test_run_collects_agrees_assembles_and_counts_in_one_call():
    backend = FlakyBackend([1])  # the first call comes back one short for every prompt; no retry round
    step = GenerationStep(
        backend,
        check=ok,
        collectives=Collectives.single(),
        group_size=2,
        max_retry_rounds=0,
        placeholder_prompt_id=0,
        placeholder_completion_id=1,
    )
    result = step.run(["a", "a", "b", "b"], stop_ids=[2])
    assert backend.calls == [[2, 2]]
    assert result.prompts == ["a", "a", "b", "b"] and result.refilled is None
    assert result.rows.keep == [False] * 4 and result.agreement.global_keep.tolist() == [False] * 4
    assert result.metrics.values["generation/dropped_prompts"] == 2.0 and result.metrics.kept_tokens == 0


def test_a_steps_weight_seconds_are_the_slowest_processs_and_its_counters_the_sum_over_processes():
    class PushingBackend(FlakyBackend):
        """Each call pushes the weights once, in ``reload`` seconds (the stats of the vLLM server backend)."""

        def __init__(self, reload: float) -> None:
            super().__init__([])
            self.reload = reload
            self.stats = {"weight_pushes": 0, "weight_resyncs": 0, "stale_completions": 0}
            self.stats |= {"weight_write_seconds": 0.0, "weight_reload_seconds": 0.0}

        def generate(self, prompts: Sequence[str], counts: Sequence[int]) -> list[list[Completion]]:
            self.stats["weight_pushes"] += 1
            self.stats["weight_reload_seconds"] += self.reload
            return super().generate(prompts, counts)

    collectives = ThreadCollectives(2)
    backends = [PushingBackend(reload=0.25), PushingBackend(reload=0.0)]
    values: list = [None, None]

    def run(rank: int, write: float) -> None:
        before = {"weight_pushes": 0, "weight_resyncs": 0, "stale_completions": 0}
        before |= {"weight_write_seconds": 0.0, "weight_reload_seconds": 0.0}
        backends[rank].stats["weight_write_seconds"] += write  # written before the step: the step's all the same
        step = GenerationStep(
            backends[rank],
            check=ok,
            collectives=collectives.of(rank),
            group_size=2,
            max_retry_rounds=0,
            placeholder_prompt_id=0,
            placeholder_completion_id=1,
            counts_before=before,
        )
        values[rank] = step.run(["a", "a"], stop_ids=[2]).metrics.values

    threads = [threading.Thread(target=run, args=(rank, write)) for rank, write in enumerate((0.5, 0.75))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert values[0] == values[1]
    assert values[0]["generation/weight_pushes"] == 2.0  # summed
    assert values[0]["generation/weight_write_seconds"] == 0.75  # the slowest process's, not cut to whole seconds
    assert values[0]["generation/weight_reload_seconds"] == 0.25
