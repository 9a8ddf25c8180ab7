"""The allowed values of every enum-like field of `MaxEntGRPOConfig`, checked in one place, with a "did you mean".

A field's choices come from where the field declares them:

- a `Literal[...]` annotation (our `maxent_objective`, `vllm_weight_transfer`, ...);
- an `Enum` in the annotation (transformers' ``eval_strategy``, ``save_strategy``, ``lr_scheduler_type``, ``optim``,
  ``hub_strategy``, ...): the enum's values;
- ``metadata={"choices": ...}`` (transformers' ``log_level``, ``ddp_backend``, ``train_sampling_strategy``, ...);
- `STRING_CHOICES` below, for the fields annotated plain ``str`` whose values are nevertheless a fixed set: TRL's
  (``loss_type``, ``vllm_mode``, ...), which TRL checks only once training has started (``loss_type='dapoo'`` fails
  at the first loss with a traceback) or never (``vllm_mode='colocat'`` runs as colocate), and our ``vllm_dtype``.

A field whose default is None also takes None. `check_choices` refuses any other value with one line naming the
field, the value, the choices and the closest one.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import functools
import types
import typing
from collections.abc import Sequence
from typing import Any

#: The choices of the ``str`` fields that declare none, in the order their documentation lists them.
STRING_CHOICES: dict[str, tuple[Any, ...]] = {
    # TRL's GRPOConfig (the values `GRPOTrainer` acts on)
    "loss_type": ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"),
    "vllm_mode": ("server", "colocate"),
    "vllm_model_impl": ("vllm", "transformers"),
    "importance_sampling_level": ("token", "sequence"),
    "multi_objective_aggregation": ("sum_then_normalize", "normalize_then_sum"),
    "scale_rewards": ("group", "batch", "none", True, False),  # GRPOConfig turns True into 'group', False into 'none'
    "vllm_importance_sampling_mode": ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask"),
    # MaxEntGRPOConfig
    "vllm_dtype": ("training", "auto", "float32", "bfloat16", "float16"),
}


def did_you_mean(value: object, choices: Sequence[object]) -> str:
    """``"; did you mean 'X'?"`` for the choice closest to ``value`` (compared as text), or ``""`` if none is close."""
    names = [str(choice) for choice in choices]
    close = difflib.get_close_matches(str(value), names, n=1)
    return f"; did you mean {choices[names.index(close[0])]!r}?" if close else ""


def _declared_choices(annotation: Any, metadata: typing.Mapping[str, Any]) -> tuple[Any, ...] | None:
    if "choices" in metadata:
        return tuple(metadata["choices"])
    members = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) else ()
    for member in (annotation, *members):
        if typing.get_origin(member) is typing.Literal:
            return typing.get_args(member)
        if isinstance(member, type) and issubclass(member, enum.Enum):
            return tuple(item.value for item in member)
    return None


@functools.cache
def field_choices(config_type: type) -> dict[str, tuple[tuple[Any, ...], bool]]:
    """``{field: (choices, takes None)}`` for every enum-like field of the dataclass ``config_type``."""
    hints = typing.get_type_hints(config_type)
    result = {}
    for spec in dataclasses.fields(config_type):
        choices = STRING_CHOICES.get(spec.name) or _declared_choices(hints[spec.name], spec.metadata)
        if choices is not None:
            result[spec.name] = (choices, spec.default is None)
    return result


def check_choices(config: object) -> None:
    """Raise ValueError ``"<field>=<value> is invalid: expected one of (...); did you mean 'X'?"`` for the first
    enum-like field of ``config`` (a dataclass) whose value is not one of its choices (an `Enum` member counts as its
    value)."""
    for name, (choices, takes_none) in field_choices(type(config)).items():
        value = getattr(config, name)
        if value is None and takes_none:
            continue
        plain = value.value if isinstance(value, enum.Enum) else value
        # `True == 1`: compare booleans and other values apart, so that 1 is not taken for True.
        if any(plain == choice and isinstance(plain, bool) == isinstance(choice, bool) for choice in choices):
            continue
        allowed = f"None or one of {choices}" if takes_none else f"one of {choices}"
        hint = did_you_mean(plain, [choice for choice in choices if isinstance(choice, str)])
        raise ValueError(f"{name}={value!r} is invalid: expected {allowed}{hint or '.'}")
