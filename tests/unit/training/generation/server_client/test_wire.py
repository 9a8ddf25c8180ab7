"""The completions wire format: request bodies, and answers read as completions (bad data failed, never raised)."""

from __future__ import annotations

import json
import math

import pytest

from maxent_grpo.training.generation.contract.completion_check import CompletionCheck
from maxent_grpo.training.generation.contract.sampling import SamplingSettings
from maxent_grpo.training.generation.server_client.http_deadline import Answer
from maxent_grpo.training.generation.server_client.wire import (
    MalformedAnswer,
    answer_choices,
    check_generation_kwargs,
    completion_payload,
    group_size_problem,
    parse_choice,
    sampled_logprobs,
)

CHECK = CompletionCheck(10)


def _logprobs(token_ids: list[int], values: list[object]) -> dict:
    return {"tokens": [f"token_id:{t}" for t in token_ids], "token_logprobs": values, "top_logprobs": None}


def test_payload_asks_for_token_ids_and_lets_generation_kwargs_override_all_but_the_seed():
    sampling = SamplingSettings(
        max_tokens=4, generation_kwargs={"model": "adapter", "seed": 1}, structured_outputs_regex="a+"
    )

    payload = completion_payload("base", [1, 2], 3, sampling, seed=7)

    assert payload["prompt"] == [1, 2] and payload["n"] == 3 and payload["max_tokens"] == 4
    assert payload["model"] == "adapter" and payload["seed"] == 7 and payload["logprobs"] == 0
    assert payload["structured_outputs"] == {"regex": "a+"}
    assert payload["return_token_ids"] is True and payload["return_tokens_as_token_ids"] is True


def test_reserved_fields_are_refused():
    with pytest.raises(ValueError, match=r"must not set \['n', 'stream'\]"):
        check_generation_kwargs({"n": 2, "stream": True, "seed": 0})
    check_generation_kwargs({"seed": 0})


def test_answers_without_a_choices_list_are_malformed():
    assert answer_choices(Answer(200, json.dumps({"choices": [1]}).encode())) == [1]
    with pytest.raises(MalformedAnswer, match="without a choices list"):
        answer_choices(Answer(200, b"not json"))
    with pytest.raises(MalformedAnswer, match="choices of type dict"):
        answer_choices(Answer(200, json.dumps({"choices": {}}).encode()))


def test_group_size_problems():
    assert group_size_problem(2, 2) is None
    assert group_size_problem(1, 2) == "short group: got 1 of 2"
    assert group_size_problem(3, 2) == "long group: got 3 of 2, extra ones dropped"


def test_a_choice_keeps_the_server_prompt_ids_and_null_logprobs_as_nan():
    choice = {"token_ids": [3, 4], "text": "hi", "prompt_token_ids": [5], "logprobs": _logprobs([3, 4], [-0.5, None])}

    parsed = parse_choice(choice, [1, 2], check=CHECK, wants_logprobs=True)

    assert parsed.problem is None and parsed.completion is not None
    assert parsed.completion.prompt_ids == [5] and parsed.completion.text == "hi" and not parsed.completion.failed
    assert parsed.completion.logprobs[0] == -0.5 and math.isnan(parsed.completion.logprobs[1])


@pytest.mark.parametrize(
    ("choice", "problem"),
    [
        ({"token_ids": [3, 12], "logprobs": None}, "completion token id outside the vocabulary [0, 10)"),
        ({"token_ids": [], "logprobs": None}, "empty completion"),
        ({"token_ids": [3], "logprobs": None}, "no logprobs although they were asked for"),
        ({"token_ids": [3], "logprobs": _logprobs([4], [-1.0])}, "no logprob for sampled token 3"),
    ],
)
def test_unusable_choices_come_back_failed_with_the_problem(choice, problem):
    parsed = parse_choice(choice, [1], check=CHECK, wants_logprobs=True)

    assert parsed.completion is not None and parsed.completion.failed and parsed.completion.logprobs is None
    assert parsed.completion.prompt_ids == [1]
    assert parsed.problem is not None and problem in parsed.problem and "marked failed" in parsed.problem


def test_a_choice_without_token_ids_is_no_completion():
    parsed = parse_choice({"text": "hi"}, [1], check=CHECK, wants_logprobs=False)

    assert parsed.completion is None and parsed.problem is not None and "token_ids" in parsed.problem


def test_logprobs_not_asked_for_are_not_bad_data():
    parsed = parse_choice({"token_ids": [3], "logprobs": None}, [1], check=CHECK, wants_logprobs=False)

    assert parsed.problem is None and parsed.completion is not None and parsed.completion.logprobs is None


def test_the_sampled_token_is_found_among_the_alternatives():
    choice_logprobs = {
        "tokens": ["token_id:9"],
        "token_logprobs": [-3.0],
        "top_logprobs": [{"token_id:9": -3.0, "token_id:4": -0.25}],
    }

    assert sampled_logprobs(choice_logprobs, [4]) == [-0.25]
    with pytest.raises(ValueError, match="1 logprobs for 2 tokens"):
        sampled_logprobs(choice_logprobs, [4, 5])
    with pytest.raises(ValueError, match="not a number"):
        sampled_logprobs(_logprobs([4], ["x"]), [4])
