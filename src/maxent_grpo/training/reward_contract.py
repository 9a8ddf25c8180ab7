"""What a reward function must return, checked at every call so that a broken return stops the run.

TRL expects one reward per completion from every reward function: a finite number, or None where the function does
not apply. It would train on a wrong count's misaligned rows, on NaN or on infinity without a word. `checked` wraps a
reward function (sync or async) so that a return breaking that contract raises `RewardContractError`, one line naming
the function and what it returned, at the step it happens. `MaxEntGRPOTrainer` wraps every reward function that is
not a reward model this way (under TRL's name for it); `maxent-grpo train` wraps the functions it loads under the name
the user gave, and the trainer leaves a function already checked as it is.
"""

from __future__ import annotations

import functools
import math
import numbers
import weakref
from collections.abc import Callable
from typing import Any

from trl.trainer.utils import get_callable_name, is_async_callable


class RewardContractError(ValueError):
    """A reward function returned something TRL cannot train on; the message is one line naming the function."""


_CHECKED: weakref.WeakSet[Callable[..., Any]] = weakref.WeakSet()
"""The wrappers `checked` returned, so that checking one again leaves it as it is."""


def contract_error(name: str, result: Any, num_completions: int) -> str | None:
    """What is wrong with ``result`` as the return of reward function ``name`` for ``num_completions``, or None."""
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


def _raise_on_contract_error(name: str, result: Any, num_completions: int) -> None:
    error = contract_error(name, result, num_completions)
    if error is not None:
        raise RewardContractError(error)


def _is_checked(func: Callable[..., Any]) -> bool:
    try:
        return func in _CHECKED
    except TypeError:  # not weakly referenceable (a builtin) or not hashable: not one of the wrappers
        return False


def checked(func: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``func`` (sync or async), raising `RewardContractError` on a return that breaks TRL's contract.

    The wrapper keeps TRL's name for ``func`` (its metrics' name); ``name`` is the one the error message uses. A
    function that `checked` already returned comes back unchanged.
    """
    if _is_checked(func):
        return func
    if is_async_callable(func):

        @functools.wraps(func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            result = await func(*args, **kwargs)
            if not args and "completions" in kwargs:  # TRL's call (a call of the user's own is theirs to judge)
                _raise_on_contract_error(name, result, len(kwargs["completions"]))
            return result

        wrapper: Callable[..., Any] = async_wrapper
    else:

        @functools.wraps(func)
        def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
            result = func(*args, **kwargs)
            if not args and "completions" in kwargs:  # TRL's call (a call of the user's own is theirs to judge)
                _raise_on_contract_error(name, result, len(kwargs["completions"]))
            return result

        wrapper = sync_wrapper
    wrapper.__name__ = get_callable_name(func)  # TRL's name for the function's metrics
    _CHECKED.add(wrapper)
    return wrapper
