"""`EpisodeBackend`: every turn through the backend, tool masks, failed episodes left out, collective tool rounds.

The chat template is replaced by integer rules so that every id can be checked: the first turn renders to
``[1, 2, 3]``; a turn starting with `CALL` calls ``add(x=<its next id>)``; tool results render to
``[90, <result>, 92]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from maxent_grpo import Completion, TokenPrompt
from maxent_grpo.training.generation.contract.completion_check import CompletionCheck
from maxent_grpo.training.generation.contract.protocol import BackendContractError, GenerationStopped
from maxent_grpo.training.generation.episodes.backend import EpisodeBackend, EpisodePrompt, EpisodeSettings
from maxent_grpo.training.generation.episodes.tool_calls import ToolCallPolicy

CALL, EOS = 60, 61
PROMPT = [{"role": "user", "content": "q"}]


def add(x: int) -> int:
    return x + 1


def _parse(ids, prefix, tools):
    if ids and ids[0] == CALL:
        call = {"type": "function", "function": {"name": "add", "arguments": {"x": ids[1]}}}
        return {"role": "assistant", "content": "", "tool_calls": [call]}
    return {"role": "assistant", "content": f"answer {ids}"}


def _settings(**overrides) -> EpisodeSettings:
    fields = {
        "render": lambda messages, tools: [1, 2, 3],
        "parse": _parse,
        "tool_suffix_ids": lambda messages: [90, int(messages[0]["content"]), 92],
        "tools": [add],
        "schema_tools": {None: [add]},
        "max_iterations": 3,
        "max_completion_length": 64,
        "max_model_len": 1000,
        "policy": ToolCallPolicy(),
    }
    return EpisodeSettings(**{**fields, **overrides})


@dataclass
class Script:
    """Replies per call: a list of completion ids per prompt, or an exception; records what it was asked."""

    replies: list
    asked: list[list[tuple[int, ...]]] = field(default_factory=list)
    counts: list[list[int]] = field(default_factory=list)

    def generate(self, prompts: Sequence[TokenPrompt], counts: Sequence[int]) -> list[list[Completion]]:
        self.asked.append([prompt.ids for prompt in prompts])
        self.counts.append(list(counts))
        reply = self.replies[len(self.asked) - 1] if len(self.asked) <= len(self.replies) else []
        if isinstance(reply, Exception):
            raise reply
        groups = []
        for position, (prompt, count) in enumerate(zip(prompts, counts, strict=True)):
            ids = reply[position] if position < len(reply) else None
            completion = None if ids is None else Completion("", list(prompt.ids), list(ids))
            groups.append([completion] * count if completion is not None else [])
        return groups


def _backend(script: Script, any_process=None, **settings) -> EpisodeBackend:
    kwargs = {} if any_process is None else {"any_process": any_process}
    return EpisodeBackend(script, _settings(**settings), environments=None, check=CompletionCheck(100), **kwargs)


def test_every_turn_goes_through_the_backend_and_tool_results_are_masked():
    script = Script([[[CALL, 4, EOS]], [[7, EOS]]])
    backend = _backend(script)
    [[episode]] = backend.generate([EpisodePrompt(PROMPT, {})], [1])
    assert script.asked == [[(1, 2, 3)], [(1, 2, 3, CALL, 4, EOS, 90, 5, 92)]]  # the continuation is the ids so far
    assert episode.prompt_ids == [1, 2, 3]
    assert episode.completion_ids == [CALL, 4, EOS, 90, 5, 92, 7, EOS]
    assert episode.tool_mask == [1, 1, 1, 0, 0, 0, 1, 1]
    assert episode.text == "answer [7, 61]"  # the final answer, which a mode key reads
    assert [message["role"] for message in episode.episode.messages] == ["assistant", "tool", "assistant"]
    assert episode.episode.tool_calls == 1 and episode.episode.tool_failures == 0


def test_episodes_of_one_prompt_share_one_first_turn_request():
    script = Script([[[7, EOS]]])
    groups = _backend(script).generate([EpisodePrompt(PROMPT, {})], [3])
    assert script.counts == [[3]] and len(groups[0]) == 3


@pytest.mark.parametrize(
    "second_call",
    [RuntimeError("server timeout in turn 2"), [], [[500, EOS]]],
    ids=["raises", "short", "out-of-vocabulary"],
)
def test_a_backend_fault_in_a_later_turn_leaves_the_slot_missing(second_call):
    script = Script([[[CALL, 4, EOS]], second_call])
    backend = _backend(script)
    assert backend.generate([EpisodePrompt(PROMPT, {})], [1]) == [[]]
    assert backend.failures == {"tool": 0, "backend": 1}


def test_a_turn_conditioned_on_other_ids_fails_its_episode():
    class Truncating(Script):
        def generate(self, prompts, counts):
            groups = super().generate(prompts, counts)
            return [[Completion("", [1], c.completion_ids) for c in group] for group in groups]

    backend = _backend(Truncating([[[CALL, 4, EOS]], [[7, EOS]]]))
    [[first_turn_only]] = _backend(Truncating([[[7, EOS]]])).generate([EpisodePrompt(PROMPT, {})], [1])
    assert first_turn_only.prompt_ids == [1]  # a first turn's ids are whatever the backend used
    assert backend.generate([EpisodePrompt(PROMPT, {})], [1]) == [[]]


def test_tool_rounds_are_collective():
    """A process whose episodes called no tool still joins each round another process needs, with an empty call."""
    script = Script([[[7, EOS]]])
    _backend(script, any_process=lambda flag: True, max_iterations=2).generate([EpisodePrompt(PROMPT, {})], [1])
    assert script.asked == [[(1, 2, 3)], [], []]
    alone = Script([[[7, EOS]]])
    _backend(alone).generate([EpisodePrompt(PROMPT, {})], [1])
    assert len(alone.asked) == 1


def test_max_iterations_bounds_the_tool_rounds():
    script = Script([[[CALL, 1, EOS]], [[CALL, 2, EOS]], [[CALL, 3, EOS]]])
    [[episode]] = _backend(script, max_iterations=2).generate([EpisodePrompt(PROMPT, {})], [1])
    assert len(script.asked) == 3 and episode.episode.tool_calls == 2
    [[untouched]] = _backend(Script([[[CALL, 1, EOS]]]), max_iterations=0).generate([EpisodePrompt(PROMPT, {})], [1])
    assert untouched.tool_mask == [1, 1, 1] and untouched.episode.tool_calls == 0


def test_tool_results_that_would_overflow_the_budget_end_the_episode_as_it_is():
    script = Script([[[CALL, 4, EOS]]])
    [[episode]] = _backend(script, max_completion_length=5).generate([EpisodePrompt(PROMPT, {})], [1])
    assert episode.completion_ids == [CALL, 4, EOS] and episode.tool_mask == [1, 1, 1]
    assert [message["role"] for message in episode.episode.messages] == ["assistant"]  # the result taken back
    assert script.asked[1:] == [[]]  # the round still happened (collective), with nothing to continue


def test_a_later_turn_is_cut_to_the_completion_budget():
    script = Script([[[CALL, 4, EOS]], [[7, 8, 9, 10, EOS]]])
    [[episode]] = _backend(script, max_completion_length=8).generate([EpisodePrompt(PROMPT, {})], [1])
    assert episode.completion_ids == [CALL, 4, EOS, 90, 5, 92, 7, 8]
    assert episode.tool_mask == [1, 1, 1, 0, 0, 0, 1, 1]


def test_a_tool_past_its_time_limit_fails_the_episode_and_feedback_keeps_a_raising_one():
    import time

    def slow(x: int) -> int:
        time.sleep(5)
        return x

    def broken(x: int) -> int:
        raise ValueError("no")

    for tool, outcome in ((slow, "failed"), (broken, "fed back")):
        tool.__name__ = "add"
        script = Script([[[CALL, 4, EOS]], [[7, EOS]]])
        backend = _backend(script, tools=[tool], policy=ToolCallPolicy(timeout=0.2), tool_suffix_ids=lambda m: [90])
        groups = backend.generate([EpisodePrompt(PROMPT, {})], [1])
        if outcome == "failed":
            assert groups == [[]] and backend.failures == {"tool": 1, "backend": 0}
            [reason] = backend.reasons  # what a batch in which every group was dropped is said to have died of
            assert reason.startswith("episode failed (tool fault): ") and "0.2" in reason, reason
        else:
            [[episode]] = groups
            assert episode.episode.tool_failures == 1
            assert episode.episode.messages[1]["content"] == "{'error': 'no'}"


def test_a_backend_returning_the_wrong_number_of_groups_stops_training():
    class Broken(Script):
        def generate(self, prompts, counts):
            return []

    with pytest.raises(BackendContractError, match="returned 0 groups for 1 prompts"):
        _backend(Broken([])).generate([EpisodePrompt(PROMPT, {})], [1])


@pytest.mark.parametrize("fault", ["stopped", "wrong group count", "environment raises"])
def test_a_fault_in_an_episode_never_leaves_the_collective_rounds_early(fault):
    """Another process still has tool calls for two rounds: this one joins both (empty calls), whatever went wrong on
    its side, and only then raises what stops training (or leaves the slot missing)."""

    class Faulty(Script):
        def generate(self, prompts, counts):
            self.asked.append([tuple(p.ids) for p in prompts])
            if fault == "stopped":
                raise GenerationStopped("the server refuses the weights")
            if fault == "wrong group count":
                return []
            return [[] for _ in prompts]

    rounds: list[bool] = []

    def any_process(flag: bool) -> bool:
        rounds.append(flag)
        return len(rounds) <= 2

    def broken_template(messages, tools):
        raise RuntimeError("template broke")

    overrides = {"render": broken_template} if fault == "environment raises" else {}
    script = Faulty([])
    backend = EpisodeBackend(
        script,
        _settings(max_iterations=5, **overrides),
        environments=None,
        check=CompletionCheck(100),
        any_process=any_process,
    )
    if fault == "environment raises":
        assert backend.generate([EpisodePrompt(PROMPT, {})], [1]) == [[]]
        assert backend.failures["tool"] == 1
    else:
        expected = GenerationStopped if fault == "stopped" else BackendContractError
        with pytest.raises(expected):
            backend.generate([EpisodePrompt(PROMPT, {})], [1])
    assert len(rounds) == 3 and len(script.asked) == 3  # the first turn and the two rounds, then the check ending them
