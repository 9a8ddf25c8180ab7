"""The reward functions and reward model of `maxent-grpo train`, by name, as TRL's `trl grpo` script takes them.

A reward function is a built-in name from `maxent_grpo.rewards.REWARDS`, a dotted path to a callable
(``my_rewards.contains_digit`` or ``my_rewards:contains_digit``), its module found on the working directory or
installed, or a Python file and a function in it (``path/to/my_rewards.py:contains_digit``; a bare file is refused
with the form to use); each is wrapped by `maxent_grpo.training.reward_contract.checked` under the name given here,
so a return that breaks TRL's contract is one line naming the function as the user wrote it. A reward model
(``reward_model_name_or_path``) is passed on by name: `GRPOTrainer` loads it as a sequence-classification model with
one label, exactly as TRL's script does.
"""

from __future__ import annotations

from collections.abc import Callable

from maxent_grpo.cli.hub_access import check_model_source
from maxent_grpo.cli.usage_error import UsageError
from maxent_grpo.dotted_path import import_callable
from maxent_grpo.rewards import REWARDS
from maxent_grpo.training.reward_contract import checked

RewardFunc = Callable[..., list[float]] | str
"""What `GRPOTrainer` takes in ``reward_funcs``: a callable, or a reward model's name or path."""


def load_reward_funcs(names: list[str], reward_model: str | None = None) -> list[RewardFunc]:
    """The reward model (first, when given, as in TRL's script), then the reward functions named in ``names``.

    Raises:
        UsageError: no reward at all, an unknown name, a dotted path that does not import or resolve to a callable,
            or a reward model that is neither a local model folder nor a Hub model that can be fetched.
    """
    if not names and reward_model is None:
        raise UsageError("no reward: set reward_funcs, reward_model_name_or_path, or both")
    funcs: list[RewardFunc] = []
    if reward_model is not None:
        check_model_source(reward_model, "reward model")
        funcs.append(reward_model)
    funcs.extend(checked(_reward_func(name), name) for name in names)
    return funcs


def _reward_func(name: str) -> Callable[..., list[float]]:
    if name in REWARDS:
        return REWARDS[name]
    if "." not in name and ":" not in name:
        raise UsageError(
            f"unknown reward function {name!r}: expected names from {sorted(REWARDS)} or a dotted path "
            "'package.module.function' (or 'package.module:function'), or 'path/to/file.py:function'"
        )
    try:
        return import_callable(name, "reward function")
    except ValueError as error:
        raise UsageError(str(error)) from error
