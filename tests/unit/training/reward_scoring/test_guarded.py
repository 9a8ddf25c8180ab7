"""A reward function's calls: transient errors retried, others raised at once, timeouts that end, failures counted."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch

from maxent_grpo.training.reward_contract import RewardContractError, checked
from maxent_grpo.training.reward_scoring.errors import RewardFunctionError, RewardFunctionGone
from maxent_grpo.training.reward_scoring.guarded import CallPolicy, guarded
from maxent_grpo.training.reward_scoring.ledger import ScoringLedger
from maxent_grpo.training.reward_scoring.threaded_calls import MAX_CALLS_LEFT_RUNNING

ROWS = {"prompts": ["a", "b"], "completions": ["x", "y"], "completion_ids": [[1], [2]]}


class Flaky:
    """Raises ``error`` on its first ``failures`` calls, then scores every completion 1.0."""

    def __init__(self, error: Exception, failures: int) -> None:
        self.error, self.failures, self.calls = error, failures, 0

    def __call__(self, completions, **kwargs):
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return [1.0] * len(completions)


def _guard(func, *, retries=2, timeout=None, ledger=None):
    ledger = ledger or ScoringLedger(["judge"], max_consecutive_failed_batches=3)
    return guarded(func, 0, "judge", CallPolicy(timeout, retries), ledger, lambda n: [True] * n), ledger


def _settle(ledger, num_rows=2, training=True):
    rewards = torch.ones(num_rows, 1)
    return ledger.settle(
        rewards, torch.ones(num_rows, dtype=torch.bool), local_rows=num_rows, group_size=2, gather=lambda t: t,
        training=training,
    )  # fmt: skip


def test_a_transient_error_is_retried_and_counted():
    func = Flaky(ConnectionError("refused"), failures=2)
    wrapped, ledger = _guard(func)
    assert wrapped(**ROWS) == [1.0, 1.0]
    assert func.calls == 3
    settled = _settle(ledger)
    assert settled.metrics["scoring/judge/retried"] == 2 and settled.metrics["scoring/judge/failed"] == 0
    assert settled.keep.all()


def test_a_call_failing_after_its_retries_leaves_its_rows_unscored_not_zero():
    func = Flaky(OSError("gone"), failures=10)
    wrapped, ledger = _guard(func, retries=1)
    assert wrapped(**ROWS) == [None, None]
    assert func.calls == 2
    settled = _settle(ledger)
    assert not settled.keep.any()
    assert settled.metrics["scoring/judge/failed"] == 1 and settled.metrics["scoring/judge/unscored_rows"] == 2


@pytest.mark.parametrize("error", [TypeError("unexpected keyword"), ValueError("no number")])
def test_any_other_error_stops_at_once_with_one_line_naming_the_function(error):
    func = Flaky(error, failures=10)
    wrapped, _ = _guard(func)
    with pytest.raises(RewardFunctionError) as raised:
        wrapped(**ROWS)
    assert func.calls == 1
    assert str(raised.value) == f"reward function judge raised {type(error).__name__}: {error}"
    assert "\n" not in str(raised.value) and raised.value.__cause__ is error


def contains_digit(completions, **kwargs):  # the string-only reward of an earlier version of the guide
    return [float(any(char.isdigit() for char in text)) for text in completions]


def test_a_string_reward_failing_on_chat_completions_is_told_they_are_message_lists():
    wrapped, _ = _guard(contains_digit)
    chat = [[{"role": "assistant", "content": "4"}], [{"role": "assistant", "content": "x"}]]
    with pytest.raises(RewardFunctionError) as raised:
        wrapped(**{**ROWS, "completions": chat})
    assert str(raised.value) == (
        "reward function judge raised AttributeError: 'dict' object has no attribute 'isdigit' (with chat prompts "
        "each completion is a list of messages ([{'role': 'assistant', 'content': ...}]), not a string: take its "
        "text with maxent_grpo.rewards.completion_text(completion), which takes both)"
    )


def test_a_contract_error_is_raised_as_it_is():
    wrapped, _ = _guard(checked(lambda completions, **kwargs: [1.0], "judge"))
    with pytest.raises(RewardContractError):
        wrapped(**ROWS)


def test_a_direct_call_goes_through_unguarded():
    func = Flaky(ConnectionError("refused"), failures=1)
    wrapped, _ = _guard(func)
    with pytest.raises(ConnectionError):
        wrapped("positional")  # not TRL's call: neither retried nor turned into unscored rows
    assert func.calls == 1


def test_every_call_failing_in_consecutive_batches_stops_the_run_naming_the_function_and_its_last_error():
    wrapped, ledger = _guard(Flaky(ConnectionError("refused"), failures=100), retries=0)
    for _ in range(2):
        wrapped(**ROWS)
        _settle(ledger)
    wrapped(**ROWS)
    with pytest.raises(RewardFunctionGone) as raised:
        _settle(ledger)
    assert str(raised.value) == (
        "reward function judge failed on every call in 3 consecutive batches "
        "(reward_max_consecutive_failed_batches=3); last error: ConnectionError: refused"
    )


def test_a_successful_batch_resets_the_streak_and_eval_batches_do_not_count():
    func = Flaky(ConnectionError("refused"), failures=2)
    wrapped, ledger = _guard(func, retries=0)
    wrapped(**ROWS)
    _settle(ledger)
    wrapped(**ROWS)
    _settle(ledger, training=False)
    wrapped(**ROWS)  # succeeds
    _settle(ledger)
    func.failures = 100
    for _ in range(2):
        wrapped(**ROWS)
        _settle(ledger)  # two failed batches after a good one: below the bound
    wrapped(**ROWS)
    with pytest.raises(RewardFunctionGone):
        _settle(ledger)


def test_a_hanging_sync_call_times_out_is_left_running_within_the_bound_and_the_retry_scores():
    release = threading.Event()
    calls = []

    def sometimes_hangs(completions, log_metric, **kwargs):
        calls.append(len(calls))
        if len(calls) % 2 == 1:
            release.wait()
            log_metric("late", 1.0)  # after its timeout: ignored
        return [2.0] * len(completions)

    logged = []
    wrapped, ledger = _guard(sometimes_hangs, retries=1, timeout=0.05)
    threads_before = threading.active_count()
    try:
        for _ in range(2 * MAX_CALLS_LEFT_RUNNING + 2):
            wrapped(**ROWS, log_metric=lambda name, value: logged.append(name))
        assert threading.active_count() <= threads_before + MAX_CALLS_LEFT_RUNNING
        settled = _settle(ledger)
        assert settled.metrics["scoring/judge/timed_out"] >= MAX_CALLS_LEFT_RUNNING
    finally:
        release.set()
    for thread in threading.enumerate():
        if thread.name == "reward-judge":
            thread.join(timeout=5)
    assert logged == []


def test_an_async_call_is_cancelled_at_the_timeout_and_retried():
    cancelled = []

    async def slow_then_fast(completions, **kwargs):
        if not cancelled:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled.append(True)
                raise
        return [3.0] * len(completions)

    wrapped, ledger = _guard(slow_then_fast, retries=1, timeout=0.05)
    assert asyncio.run(wrapped(**ROWS)) == [3.0, 3.0]
    assert cancelled == [True]
    assert _settle(ledger).metrics["scoring/judge/timed_out"] == 1
