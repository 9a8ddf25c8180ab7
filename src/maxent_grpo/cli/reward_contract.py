"""TRL's call of a reward function, checked before `maxent-grpo train` loads the model.

TRL calls ``func(prompts=..., completions=..., completion_ids=..., <dataset columns>..., trainer_state=...,
log_extra=..., log_metric=...)``. A signature that cannot take those keywords is refused at once (`check_signature`).
What the function returns is checked at every call, by the trainer as for every user
(`maxent_grpo.training.reward_contract`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

from maxent_grpo.cli.usage_error import UsageError

TRL_REWARD_KWARGS = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric")
"""The keyword arguments TRL passes to every reward function besides the dataset columns."""


def check_signature(func: Callable[..., Any], name: str, columns: Iterable[str]) -> None:
    """``func`` accepts the keyword arguments TRL calls it with, given the data set's ``columns``."""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):  # a callable without a signature (a builtin): TRL's call is the only test
        return
    passed = dict.fromkeys([*TRL_REWARD_KWARGS, *(column for column in columns if column != "prompt")])
    try:
        signature.bind(**passed)
    except TypeError as error:
        raise UsageError(
            f"reward function {name} cannot be called the way TRL calls it ({error}): TRL passes the keyword "
            f"arguments {', '.join(passed)}; give it a **kwargs parameter"
        ) from error
