"""TRL's contract with a reward function, checked where `maxent-grpo train` can name the function that breaks it.

TRL calls ``func(prompts=..., completions=..., completion_ids=..., <dataset columns>..., trainer_state=...,
log_extra=..., log_metric=...)`` and expects one reward per completion: a finite number, or None where the function
does not apply. A signature that cannot take those keywords is refused before the model loads (`check_signature`);
a return that breaks the contract (a wrong count, a value that is not a number, NaN or infinity, which TRL would
train on) stops the run at the step it happens with one line naming the function (`checked`).
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Callable, Iterable
from typing import Any

from trl.trainer.utils import get_callable_name, is_async_callable

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


def _contract_error(name: str, result: Any, num_completions: int) -> str | None:
    """What is wrong with ``result`` as the return of reward function ``name``, or None."""
    if isinstance(result, str | bytes | dict) or not hasattr(result, "__len__") or not hasattr(result, "__iter__"):
        return f"reward function {name} returned {type(result).__name__} {_short(result)}: expected a list of rewards"
    if len(result) != num_completions:
        return (
            f"reward function {name} returned {len(result)} rewards for {num_completions} completions: expected one "
            "per completion"
        )
    for index, value in enumerate(result):
        if value is None:
            continue
        value = value.item() if hasattr(value, "item") and getattr(value, "ndim", 0) == 0 else value
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return (
                f"reward function {name} returned {type(value).__name__} {_short(value)} for completion {index}: "
                "expected a number or None"
            )
        if not math.isfinite(value):
            return (
                f"reward function {name} returned {value} for completion {index}: expected a finite number or None "
                "(None: the function does not apply to that completion)"
            )
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def checked(func: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``func`` (sync or async), raising `UsageError` on a return that breaks TRL's contract."""

    if is_async_callable(func):

        @functools.wraps(func)
        async def async_wrapper(**kwargs: Any) -> Any:
            result = await func(**kwargs)
            _raise_on_contract_error(name, result, len(kwargs["completions"]))
            return result

        async_wrapper.__name__ = get_callable_name(func)  # TRL's name for the function's metrics
        return async_wrapper

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> Any:
        result = func(**kwargs)
        _raise_on_contract_error(name, result, len(kwargs["completions"]))
        return result

    wrapper.__name__ = get_callable_name(func)
    return wrapper


def _raise_on_contract_error(name: str, result: Any, num_completions: int) -> None:
    error = _contract_error(name, result, num_completions)
    if error is not None:
        raise UsageError(error)
