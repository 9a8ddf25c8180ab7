"""A reward function whose signature cannot take TRL's keyword arguments is one UsageError naming the function."""

from __future__ import annotations

import pytest

from maxent_grpo.cli.reward_contract import check_signature
from maxent_grpo.cli.usage_error import UsageError
from maxent_grpo.rewards import REWARDS
from maxent_grpo.training.reward_contract import checked


def test_the_signature_is_checked_through_the_contract_wrapper():
    func = checked(REWARDS["vowel_start"], "vowel_start")
    check_signature(func, "vowel_start", ["prompt"])  # through the wrapper, to the function itself


def test_a_signature_that_cannot_take_trls_keywords_is_refused():
    def narrow(completions):
        return [0.0] * len(completions)

    def positional_only(prompts, completions, /, **kwargs):
        return [0.0] * len(completions)

    def named_everything(prompts, completions, completion_ids, trainer_state, log_extra, log_metric, answer):
        return [0.0] * len(completions)

    with pytest.raises(UsageError, match=r"reward function narrow cannot be called the way TRL calls it \(got an "):
        check_signature(narrow, "narrow", ["prompt"])
    with pytest.raises(UsageError, match="positional_only cannot be called"):
        check_signature(positional_only, "positional_only", ["prompt"])
    check_signature(named_everything, "named_everything", ["prompt", "answer"])
    with pytest.raises(UsageError, match="got an unexpected keyword argument 'topic'"):
        check_signature(named_everything, "named_everything", ["prompt", "answer", "topic"])
