"""The logic of generating one window ahead (`async_generation`), with an in-process backend and no trainer."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from maxent_grpo.collectives import Collectives
from maxent_grpo.training.generation.async_generation import AsyncGeneration
from maxent_grpo.training.generation.call_ahead import FirstCall, first_call
from maxent_grpo.training.generation.contract.completion_check import CompletionCheck
from maxent_grpo.training.generation.contract.protocol import Completion, TokenPrompt
from maxent_grpo.training.generation.step import GenerationStep


class VersionedBackend:
    """Completions of the weights it was last given (``version``), one id per prompt index; records its calls and the
    thread they ran on. ``gate``, when set, holds each call until it is released."""

    def __init__(self) -> None:
        self.version = "v0"
        self.calls: list[tuple[list, list[int], str]] = []
        self.gate: threading.Event | None = None
        self.fail_with: BaseException | None = None
        self.deadline: float | None = None
        self.stats = {"weight_pushes": 0, "weight_resyncs": 0, "stale_completions": 0}

    def generate(self, prompts, counts):
        self.calls.append((list(prompts), list(counts), threading.current_thread().name))
        if self.gate is not None:
            while not self.gate.wait(0.01):
                if self.deadline is not None and time.monotonic() >= self.deadline:
                    return [[] for _ in prompts]
        if self.fail_with is not None:
            raise self.fail_with
        self.stats["weight_pushes"] += 1
        return [
            [Completion(p, [1], [2 + i], logprobs=[-1.0], weight_version=self.version) for i in range(count)]
            for p, count in zip(prompts, counts, strict=True)
        ]

    def set_deadline(self, deadline):
        self.deadline = deadline


def rows(*prompts: str, group_size: int = 2) -> list[dict]:
    return [{"prompt": p} for p in prompts for _ in range(group_size)]


def windows(count: int, size: int = 1) -> list[list[dict]]:
    """``count`` windows of ``size`` micro-batches; micro-batch k holds prompts "k-a" and "k-b", G = 2."""
    return [rows(f"{k}-a", f"{k}-b") for k in range(count * size)]


def make(backend, generate_every=1, window_size=1, max_staleness=1, span=1) -> AsyncGeneration:
    return AsyncGeneration(
        backend,
        generate_every=generate_every,
        window_size=window_size,
        max_staleness=max_staleness,
        group_size=2,
        process_index=0,
        step_timeout=None,
        span=span,
    )


def started_ahead(backend, written_at: int | None = 0, **options) -> tuple[AsyncGeneration, Iterator]:
    """Window 0 read (window 1 read ahead), the weights of step ``written_at`` written as "v0" (None: no version
    written), and window 1's first call started; returns the generation ahead and the epoch's iterator."""
    ahead = make(backend, **options)
    iterator = iter(windows(3))
    ahead.window_inputs(iterator, 1, 0)
    if written_at is not None:
        ahead.weights_written("v0", written_at)
    ahead.start_next(0, lambda: None, last_window=False)
    return ahead, iterator


def next_prompts(ahead: AsyncGeneration, iterator: Iterator) -> list[str]:
    """Window 1's inputs taken (from those read ahead) and its rows' prompts."""
    return [row["prompt"] for row in ahead.window_inputs(iterator, 1, 1)[0]]


def step_of(backend, group_size: int = 2, retries: int = 0) -> GenerationStep:
    """A one-process generation step over ``backend``."""
    return GenerationStep(
        backend,
        check=CompletionCheck(100),
        collectives=Collectives.single(),
        group_size=group_size,
        max_retry_rounds=retries,
        placeholder_prompt_id=0,
        placeholder_completion_id=0,
    )


def test_first_call_is_the_one_a_generation_step_makes():
    prompts = ["a", "a", "b", "b", "c", "c"]
    assert first_call(prompts, 0, 2) == FirstCall(["a", "b", "c"], [2, 2, 2])
    # A process whose rows start inside a group (rows 6..11 of groups of 4): the tail of one group first.
    assert first_call(prompts, 1, 4) == FirstCall(["a", "b"], [2, 4])


def test_the_next_window_is_read_ahead_and_handed_out_in_order():
    backend = VersionedBackend()
    ahead = make(backend, window_size=2)
    iterator = iter(windows(3, size=2))
    first = ahead.window_inputs(iterator, 2, 0)
    assert [batch[0]["prompt"] for batch in first] == ["0-a", "1-a"]
    second = ahead.window_inputs(iterator, 2, 2)
    assert [batch[0]["prompt"] for batch in second] == ["2-a", "3-a"]
    last = ahead.window_inputs(iterator, 2, 4)
    assert [batch[0]["prompt"] for batch in last] == ["4-a", "5-a"]
    assert ahead.window_inputs(iterator, 2, 6) == []  # the epoch is over
    # A new epoch's iterator: nothing read from the old one is handed out.
    assert [batch[0]["prompt"] for batch in ahead.window_inputs(iter(windows(1)), 1, 6)] == ["0-a"]


def test_the_first_call_made_ahead_is_replayed_and_the_rest_is_generated_live():
    backend = VersionedBackend()
    ahead = make(backend)
    iterator = iter(windows(3))
    ahead.window_inputs(iterator, 1, 0)
    ahead.weights_written("v0", 0)
    synced: list[int] = []
    ahead.start_next(0, lambda: synced.append(1), last_window=False)
    ahead.wait()
    assert synced == [1] and backend.calls[0][0] == ["1-a", "1-b"]
    assert backend.calls[0][2] == "maxent-grpo-async-generation"

    next_window = ahead.window_inputs(iterator, 1, 1)
    backend.version = "v1"
    ahead.weights_written("v1", 1)
    prompts = [row["prompt"] for row in next_window[0]]
    replayed = ahead.take(1, prompts, trained_step=1, training=True)
    assert replayed is not None
    groups = replayed.generate(["1-a", "1-b"], [2, 2])
    assert [c.weight_version for group in groups for c in group] == ["v0"] * 4
    assert len(backend.calls) == 1  # answered from the call made ahead
    replayed.generate(["1-a"], [1])
    assert len(backend.calls) == 2 and backend.calls[1][2] == threading.current_thread().name


@pytest.mark.parametrize(("written_at", "max_staleness", "kept"), [(0, 1, 4), (0, 2, 4), (None, 1, 0)])
def test_completions_older_than_max_staleness_or_of_unknown_version_are_asked_for_again(
    written_at, max_staleness, kept
):
    backend = VersionedBackend()
    ahead, iterator = started_ahead(backend, written_at, max_staleness=max_staleness)
    replayed = ahead.take(1, next_prompts(ahead, iterator), trained_step=1, training=True)
    groups = replayed.generate(["1-a", "1-b"], [2, 2])
    assert sum(len(group) for group in groups) == kept and replayed.too_stale == 4 - kept


def test_a_completion_two_steps_old_is_too_stale_for_max_staleness_one():
    backend = VersionedBackend()
    ahead, iterator = started_ahead(backend)
    replayed = ahead.take(1, next_prompts(ahead, iterator), trained_step=2, training=True)
    assert replayed.generate(["1-a", "1-b"], [2, 2]) == [[], []] and replayed.too_stale == 4


def test_the_generation_step_retries_what_the_call_ahead_left_out_from_the_current_weights():
    backend = VersionedBackend()
    ahead, iterator = started_ahead(backend)
    prompts = next_prompts(ahead, iterator)
    replayed = ahead.take(1, prompts, trained_step=2, training=True)  # two steps on: everything is too stale
    backend.version = "v2"
    step = step_of(replayed, retries=1)
    collected = step.collect(prompts)
    assert all(collected.complete)
    assert {c.weight_version for group in collected.groups for c in group} == {"v2"}
    assert collected.stats["retry_rounds"] == 1 and collected.stats["invalid_completions"] == 0


def test_a_call_ahead_that_raised_raises_in_the_step_as_it_would_have():
    backend = VersionedBackend()
    backend.fail_with = ConnectionError("server gone")
    ahead, iterator = started_ahead(backend, written_at=None)
    replayed = ahead.take(1, next_prompts(ahead, iterator), trained_step=1, training=True)
    with pytest.raises(ConnectionError, match="server gone"):
        replayed.generate(["1-a", "1-b"], [2, 2])


def test_other_prompts_than_those_generated_ahead_are_generated_live():
    backend = VersionedBackend()
    ahead, iterator = started_ahead(backend, written_at=None)
    ahead.window_inputs(iterator, 1, 1)
    assert ahead.take(1, ["x", "x", "y", "y"], trained_step=1, training=True) is None
    assert ahead.take(1, ["x", "x"], trained_step=1, training=True) is None  # nothing left in flight


def test_an_evaluation_waits_for_the_call_ahead_and_leaves_it_for_its_step():
    backend = VersionedBackend()
    backend.gate = threading.Event()
    ahead, iterator = started_ahead(backend)
    threading.Timer(0.2, backend.gate.set).start()
    assert ahead.take(0, ["e", "e"], trained_step=1, training=False) is None  # waited: the backend is free now
    assert len(backend.calls) == 1
    assert ahead.take(1, next_prompts(ahead, iterator), trained_step=1, training=True) is not None


@pytest.mark.parametrize(
    ("generate_every", "window_size", "started_at"),
    [
        (1, 1, {0: True}),  # a generation every window: started once this window's is done
        (1, 2, {0: False, 1: True}),  # two generations per window: only after the last one
        (2, 1, {"window": True}),  # num_iterations = 2: from the window without a generation
    ],
)
def test_the_call_ahead_starts_once_the_window_has_no_generation_left(generate_every, window_size, started_at):
    backend = VersionedBackend()
    ahead = make(backend, generate_every=generate_every, window_size=window_size)
    iterator = iter(rows(f"{k}", f"{k}'") for k in range(8))
    if "window" in started_at:  # window 1 (micro-step 1) has no generation, window 2 (micro-step 2) has
        ahead.window_inputs(iterator, 1, 0)
        ahead.window_inputs(iterator, 1, 1)
        ahead.start_next(None, lambda: None, last_window=False)
        ahead.wait()
        assert [call[0] for call in backend.calls] == [["2", "2'"]]
        return
    ahead.window_inputs(iterator, window_size, 0)
    for step, starts in started_at.items():
        ahead.start_next(step, lambda: None, last_window=False)
        ahead.wait()
        assert bool(backend.calls) == starts
    assert backend.calls[0][0] == [str(window_size), f"{window_size}'"]


def test_nothing_is_generated_ahead_of_the_last_window_or_the_end_of_the_epoch():
    backend = VersionedBackend()
    ahead = make(backend)
    iterator = iter(windows(1))
    ahead.window_inputs(iterator, 1, 0)
    ahead.start_next(0, lambda: None, last_window=False)  # no next window in this epoch
    ahead.window_inputs(iter(windows(3)), 1, 1)
    ahead.start_next(1, lambda: None, last_window=True)
    ahead.close()
    assert backend.calls == []


@pytest.mark.parametrize(
    ("generate_every", "last_window", "calls_ahead"),
    [(1, False, True), (1, True, False), (2, False, False)],
    ids=["the next window generates", "the run's last window", "the next window has no generation"],
)
def test_a_call_is_made_ahead_after_a_window_only_where_the_next_one_generates(
    generate_every, last_window, calls_ahead
):
    backend = VersionedBackend()
    ahead = make(backend, generate_every=generate_every)
    iterator = iter(windows(3))
    ahead.window_inputs(iterator, 1, 0)  # window 0 generates; window 1 does only with a generation every window
    assert ahead.calls_ahead_after_window(last_window) == calls_ahead
    ahead.start_next(0, lambda: None, last_window=last_window)
    ahead.wait()
    assert bool(backend.calls) == calls_ahead


def test_closing_cuts_a_call_in_flight_short_and_leaves_no_thread():
    backend = VersionedBackend()
    backend.gate = threading.Event()  # never released: only the deadline close sets ends the call
    ahead, _ = started_ahead(backend, written_at=None)
    began = time.monotonic()
    ahead.close()
    assert time.monotonic() - began < 5
    assert not any(t.name == "maxent-grpo-async-generation" and t.is_alive() for t in threading.enumerate())
    assert backend.deadline is None  # the backend is not left out of time for whoever uses it next


def test_the_step_counts_the_weight_pushes_the_call_ahead_made():
    backend = VersionedBackend()
    ahead, iterator = started_ahead(backend)
    prompts = next_prompts(ahead, iterator)
    replayed = ahead.take(1, prompts, trained_step=1, training=True)
    assert replayed.stats["weight_pushes"] == 0  # as it stood when the call ahead started
    step = step_of(replayed, retries=0)
    local = step.collect(prompts)
    agreement = step.agree(local)
    assert step.metrics(local, agreement, [99]).values["generation/weight_pushes"] == 1.0
    metrics = ahead.metrics(step.assemble(local, agreement), 1, Collectives.single())
    assert metrics["generation/staleness_mean"] == metrics["generation/staleness_max"] == 1.0
    assert metrics["generation/too_stale_completions"] == 0.0


class PromptTaggedBackend:
    """Each completion's text names its prompt; it is sampled from ``version``; each call returns for prompt i at
    most ``caps[i]`` completions (the rest missing)."""

    def __init__(self, version: str, caps: dict[str, int]) -> None:
        self.version, self.caps = version, caps
        self.asked: list[tuple[list, list[int]]] = []

    def generate(self, prompts, counts):
        self.asked.append((list(prompts), list(counts)))
        completion = Completion("", [1], [2], logprobs=[-1.0], weight_version=self.version)
        return [
            [replace(completion, text=p)] * min(count, self.caps.get(p, count))
            for p, count in zip(prompts, counts, strict=True)
        ]


def raising(prompts, counts):
    raise ConnectionError("lost")


@settings(max_examples=60, deadline=None)
@given(
    ahead_caps=st.lists(st.integers(0, 3), min_size=3, max_size=3),
    live_caps=st.lists(st.integers(0, 3), min_size=3, max_size=3),
    ahead_steps_old=st.integers(0, 3),
    raised=st.booleans(),
)
def test_whatever_the_call_ahead_brought_back_the_step_keeps_only_aligned_fresh_complete_groups(
    ahead_caps, live_caps, ahead_steps_old, raised
):
    prompts = ["a", "a", "a", "b", "b", "b", "c", "c", "c"]  # G = 3
    names = ["a", "b", "c"]
    ahead_backend = PromptTaggedBackend("old", dict(zip(names, ahead_caps, strict=True)))
    if raised:
        ahead_backend.generate = raising
    ahead = AsyncGeneration(
        ahead_backend, generate_every=1, window_size=1, max_staleness=1, group_size=3, process_index=0,
        step_timeout=None,
    )  # fmt: skip
    iterator = iter([[{"prompt": p} for p in prompts]] * 2)
    ahead.window_inputs(iterator, 1, 0)
    ahead.weights_written("old", 5 - ahead_steps_old)
    ahead.weights_written("new", 5)
    ahead.start_next(0, lambda: None, last_window=False)
    ahead.window_inputs(iterator, 1, 1)
    replayed = ahead.take(1, prompts, trained_step=5, training=True)
    live = PromptTaggedBackend("new", dict(zip(names, live_caps, strict=True)))
    replayed.backend = live
    step = step_of(replayed, group_size=3, retries=2)
    batch = step.collect(prompts)
    only_new = raised or ahead_steps_old > 1  # nothing of the call ahead may be kept
    for name, group, complete in zip(names, batch.groups, batch.complete, strict=True):
        assert all(c.text == name for c in group)  # I2: only its own prompt's completions
        assert len(group) <= 3 and complete == (len(group) == 3)  # I1: never longer, complete means exactly G
        if only_new:
            assert all(c.weight_version == "new" for c in group)  # nothing too stale or lost is kept
    for asked_prompts, counts in live.asked:  # retries ask only for deficits
        assert all(0 < count <= 3 for count in counts) and len(set(asked_prompts)) == len(asked_prompts)
    rows = step.assemble(batch, step.agree(batch))
    metrics = ahead.metrics(rows, 5, Collectives.single())
    assert 0 <= metrics["generation/staleness_max"] <= 1


def test_with_num_iterations_two_staleness_is_counted_at_the_last_step_a_batch_is_trained():
    backend = VersionedBackend()
    ahead = make(backend, generate_every=2, max_staleness=2, span=2)  # each batch is trained at two steps
    iterator = iter(windows(4))
    ahead.window_inputs(iterator, 1, 0)
    ahead.window_inputs(iterator, 1, 1)  # window 1: no generation; window 2 has one
    backend.version = "v1"
    ahead.weights_written("v1", 1)
    ahead.start_next(None, lambda: None, last_window=False)
    batch = ahead.window_inputs(iterator, 1, 2)
    prompts = [row["prompt"] for row in batch[0]]
    replayed = ahead.take(2, prompts, trained_step=2, training=True)
    step = step_of(replayed, group_size=2, retries=0)
    local = step.collect(prompts)
    metrics = ahead.metrics(step.assemble(local, step.agree(local)), 2, Collectives.single())
    assert all(local.complete) and metrics["generation/staleness_max"] == 2.0  # trained again at step 3


def test_a_call_that_outlives_closing_is_waited_for_by_whoever_uses_the_backend_next(monkeypatch):
    from maxent_grpo.training.generation import async_generation

    monkeypatch.setattr(async_generation, "_CLOSE_WAIT_SECONDS", 0.2)
    backend = VersionedBackend()
    backend.gate = threading.Event()
    backend.set_deadline = lambda deadline: None  # a backend that cannot be cut short
    ahead = make(backend)
    ahead.window_inputs(iter(windows(3)), 1, 0)
    ahead.start_next(0, lambda: None, last_window=False)
    ahead.close()
    [thread] = [t for t in threading.enumerate() if t.name == "maxent-grpo-async-generation"]
    assert thread.is_alive()  # abandoned, not joined
    threading.Timer(0.3, backend.gate.set).start()
    ahead.wait()  # an evaluation, or the next train call, waits for it before it uses the backend
    assert not thread.is_alive()


def test_prompts_are_tokenized_on_the_main_thread_where_the_backend_can():
    backend = VersionedBackend()
    tokenized_on: list[str] = []

    def token_prompts(prompts):
        tokenized_on.append(threading.current_thread().name)
        return [TokenPrompt((ord(p[0]),)) for p in prompts]

    backend.token_prompts = token_prompts
    ahead, iterator = started_ahead(backend, written_at=None)
    ahead.wait()
    assert tokenized_on == [threading.current_thread().name]
    assert backend.calls[0][0] == [TokenPrompt((ord("1"),)), TokenPrompt((ord("1"),))]
    assert ahead.take(1, next_prompts(ahead, iterator), trained_step=1, training=True) is not None
