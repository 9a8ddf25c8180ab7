"""The per-process collection step: first call, retries for deficits, validation, incomplete groups."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from maxent_grpo import Completion
from maxent_grpo.training.generation.collect import collect_completion_groups


class ScriptedBackend:
    """Returns, call after call, the number of completions scripted per prompt (tagged with the prompt)."""

    def __init__(self, script: list[list[int] | Exception]) -> None:
        self.script = list(script)
        self.calls: list[tuple[list[str], list[int]]] = []

    def generate(self, prompts: Sequence[str], counts: Sequence[int]) -> list[list[Completion]]:
        self.calls.append((list(prompts), list(counts)))
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return [
            [Completion(text=f"{p}-{k}", prompt_ids=[1], completion_ids=[2, k]) for k in range(n)]
            for p, n in zip(prompts, step, strict=True)
        ]


def ok(completion: Completion) -> str | None:
    return None


def test_retries_ask_only_for_the_deficit_and_keep_alignment():
    backend = ScriptedBackend([[4, 1, 0], [2, 1], [0, 1]])
    result = collect_completion_groups(backend, ["a", "b", "c"], [4, 4, 4], retry_limit=2, check=ok)
    assert backend.calls == [(["a", "b", "c"], [4, 4, 4]), (["b", "c"], [3, 4]), (["b", "c"], [1, 3])]
    assert result.complete == [True, False, False]
    assert all(c.text.startswith(p) for p, g in zip("abc", result.groups, strict=True) for c in g)
    assert [len(g) for g in result.groups] == [4, 3, 2]
    assert result.stats["retried_prompts"] == 2 and result.stats["retry_rounds"] == 2
    assert result.stats["dropped_prompts"] == 2


def test_extra_completions_are_trimmed_and_zero_retries_disable_retrying():
    backend = ScriptedBackend([[6, 2]])
    result = collect_completion_groups(backend, ["a", "b"], [4, 4], retry_limit=0, check=ok)
    assert [len(g) for g in result.groups] == [4, 2]
    assert result.complete == [True, False]
    assert len(backend.calls) == 1


def test_invalid_completions_count_as_missing_and_are_retried():
    backend = ScriptedBackend([[3], [1]])

    def reject_k0(completion: Completion) -> str | None:
        return "k0 is bad" if completion.completion_ids[1] == 0 else None

    result = collect_completion_groups(backend, ["a"], [3], retry_limit=3, check=reject_k0)
    assert result.stats["invalid_completions"] == 2
    assert "k0 is bad" in result.reasons
    assert backend.calls[1] == (["a"], [1])
    assert result.complete == [False]


def test_backend_exception_makes_the_round_missing_and_is_logged(caplog):
    backend = ScriptedBackend([TimeoutError("slow"), [2]])
    with caplog.at_level(logging.WARNING):
        result = collect_completion_groups(backend, ["a"], [2], retry_limit=1, check=ok)
    assert result.complete == [True]
    assert result.stats["backend_errors"] == 1
    assert "TimeoutError: slow" in caplog.text


def test_groups_of_different_sizes_are_retried_in_one_call_per_round():
    backend = ScriptedBackend([[1, 3, 2], [1, 1]])
    result = collect_completion_groups(backend, ["a", "b", "c"], [2, 4, 2], retry_limit=1, check=ok)
    assert result.complete == [True, True, True]
    assert backend.calls[1:] == [(["a", "b"], [1, 1])]  # both buckets' deficits in the round's single call
    assert result.calls == 2


def test_a_backend_returning_the_wrong_number_of_groups_is_a_bug():
    class Wrong:
        def generate(self, prompts, counts):
            return []

    with pytest.raises(ValueError, match="returned 0 groups for 1 prompts"):
        collect_completion_groups(Wrong(), ["a"], [1], retry_limit=1, check=ok)
