"""A sync reward function that hangs on one call in ten, with ``reward_timeout``: the run goes on, each hung call is
retried, and the trainer's threads and processes after 20 steps are those after the first step plus at most the
documented bound of calls left running (`threaded_calls.MAX_CALLS_LEFT_RUNNING`)."""

from __future__ import annotations

import threading

import psutil
import pytest
from transformers import TrainerCallback

from maxent_grpo import MaxEntGRPOTrainer
from maxent_grpo.training.reward_scoring.threaded_calls import MAX_CALLS_LEFT_RUNNING
from tests.support.tagged_backend import TaggedBackend
from tests.support.training import letter_dataset, tiny_config, tiny_model_and_tokenizer

pytestmark = pytest.mark.slow

STEPS = 20


class HangsOneCallInTen:
    """Distinct characters of each completion; its 5th, 15th, 25th ... call hangs until ``release`` is set."""

    __name__ = "sometimes_hangs"

    def __init__(self, release: threading.Event) -> None:
        self.release = release
        self.calls = 0

    def __call__(self, completions, **kwargs):
        self.calls += 1
        if self.calls % 10 == 5:
            self.release.wait(timeout=300)
        return [float(len(set(completion))) for completion in completions]


class Counts(TrainerCallback):
    """This process's Python threads, OS threads and child processes at the end of each step."""

    def __init__(self) -> None:
        self.per_step: list[tuple[int, int, int]] = []

    def on_step_end(self, args, state, control, **kwargs):
        process = psutil.Process()
        self.per_step.append((threading.active_count(), process.num_threads(), len(process.children(recursive=True))))


def test_a_sync_reward_hanging_on_one_call_in_ten_leaves_at_most_the_bound_running(tmp_path):
    release = threading.Event()
    reward = HangsOneCallInTen(release)
    counts = Counts()
    model, tokenizer = tiny_model_and_tokenizer()
    trainer = MaxEntGRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=tiny_config(tmp_path, max_steps=STEPS, reward_timeout=0.3, reward_retries=1),
        train_dataset=letter_dataset(16),
        processing_class=tokenizer,
        generation_backend=TaggedBackend(tokenizer),
        callbacks=[counts],
    )
    try:
        trainer.train()
        first, last = counts.per_step[0], counts.per_step[-1]
        assert trainer.state.global_step == STEPS
        assert reward.calls == STEPS + 2  # two calls hung, each retried once
        for python_threads, os_threads, processes in counts.per_step:
            assert python_threads <= first[0] + MAX_CALLS_LEFT_RUNNING
            assert os_threads <= first[1] + MAX_CALLS_LEFT_RUNNING
            assert processes == first[2]
        assert last[0] == first[0] + 2  # the two hung calls, still running, and nothing else
    finally:
        release.set()
    logs = [entry for entry in trainer.state.log_history if "scoring/sometimes_hangs/timed_out" in entry]
    assert sum(entry["scoring/sometimes_hangs/timed_out"] for entry in logs) == 2
    assert sum(entry["scoring/sometimes_hangs/unscored_rows"] for entry in logs) == 0  # the retries scored them
