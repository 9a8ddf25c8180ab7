"""Reward functions never see dropped rows; their per-row outputs and extra logs return to full rows."""

from __future__ import annotations

import asyncio
import logging

import torch
from trl.trainer.utils import is_async_callable

from maxent_grpo.training.reward_masking import TRL_UNSCORABLE_WARNING, mask_dropped_rows, warn_unscorable_rows


def test_only_kept_rows_reach_the_function_and_results_scatter_back():
    seen = {}
    logged = {}

    def reward(prompts, completions, completion_ids, answer, trainer_state=None, log_extra=None, **kwargs):
        seen.update(prompts=prompts, answer=answer, state=trainer_state)
        log_extra("note", [f"n-{p}" for p in prompts])
        return [float(len(c)) for c in completions]

    keep = [True, False, True]
    wrapped = mask_dropped_rows(reward, lambda: keep)
    assert wrapped.__name__ == "reward"
    out = wrapped(
        prompts=["a", "b", "c"],
        completions=["x", "yy", "zzz"],
        completion_ids=[[1], [2, 2], [3, 3, 3]],
        answer=["A", "B", "C"],
        trainer_state="state",
        log_extra=lambda column, values: logged.update({column: values}),
    )
    assert out == [1.0, None, 3.0]
    assert seen == {"prompts": ["a", "c"], "answer": ["A", "C"], "state": "state"}
    assert logged == {"note": ["n-a", None, "n-c"]}


def test_all_kept_passes_through_and_none_kept_calls_with_zero_rows():
    calls = []

    def reward(prompts, completions, completion_ids, answer, **kwargs):
        calls.append((prompts, completions, completion_ids, answer))
        return [0.5] * len(prompts)

    kept_all = mask_dropped_rows(reward, lambda: None)
    assert kept_all(prompts=["a"], completions=["x"], completion_ids=[[1]], answer=["A"]) == [0.5]
    dropped_all = mask_dropped_rows(reward, lambda: [False, False])
    rows = {"prompts": ["a", "b"], "completions": ["x", "y"], "completion_ids": [[1], [2]], "answer": ["A", "B"]}
    assert dropped_all(**rows) == [None, None]
    assert calls == [(["a"], ["x"], [[1]], ["A"]), ([], [], [], [])]


def test_async_reward_functions_stay_async():
    async def reward(prompts, completions, completion_ids, **kwargs):
        return [1.0] * len(prompts)

    wrapped = mask_dropped_rows(reward, lambda: [False, True])
    assert is_async_callable(wrapped)
    out = asyncio.run(wrapped(prompts=["a", "b"], completions=["x", "y"], completion_ids=[[1], [2]]))
    assert out == [None, 1.0]


def test_kept_rows_that_every_function_scored_none_get_trls_warning_and_dropped_rows_do_not(caplog):
    nan = float("nan")
    # Two processes of 2 rows each; this is process 1: its rows are 2 (kept, unscored) and 3 (dropped, unscored).
    rewards = torch.tensor([[nan], [1.0], [nan], [nan]])
    keep = torch.tensor([True, True, True, False])
    inputs = [{"prompt": "p2", "answer": "A"}, {"prompt": "p3", "answer": "B"}]
    with caplog.at_level(logging.WARNING):
        warn_unscorable_rows(rewards, keep, inputs, ["p2", "p3"], ["c2", "c3"], process_index=1)
    assert TRL_UNSCORABLE_WARNING == "All reward functions returned None for the following kwargs:"  # TRL's words
    assert f"{TRL_UNSCORABLE_WARNING}\n{{'answer': 'A', 'prompt': 'p2', 'completion': 'c2'}}\n" in caplog.text
    assert "(1 of this process's 1 kept completions scored None from every reward function;" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # only the dropped row is unscored: no warning
        warn_unscorable_rows(rewards[[1, 3]], keep[[1, 3]], inputs, ["p2", "p3"], ["c2", "c3"], process_index=0)
    assert caplog.text == ""
