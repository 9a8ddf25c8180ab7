"""`maxent-grpo train`'s arguments: a YAML recipe and `--field value` overrides, parsed the way TRL's scripts do.

TRL's `TrlParser` over `TrainScriptArguments` (TRL's `ScriptArguments` plus the reward and column fields),
`MaxEntGRPOConfig` and TRL's `ModelConfig`; command-line values win over the recipe. Every recipe value goes through
its field's own argparse type and choices, so a bad value is one `UsageError` naming the field and the recipe.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import yaml
from trl import ModelConfig, TrlParser

from maxent_grpo.cli.usage_error import UsageError

if TYPE_CHECKING:
    from maxent_grpo.cli.script_args import TrainScriptArguments
    from maxent_grpo.config import MaxEntGRPOConfig

PROG = "maxent-grpo"


class RecipeParser(TrlParser):
    """TRL's parser over the train script arguments, `MaxEntGRPOConfig` and `ModelConfig`; bad arguments raise
    `UsageError`."""

    def __init__(self) -> None:
        from maxent_grpo.cli.script_args import TrainScriptArguments
        from maxent_grpo.config import MaxEntGRPOConfig

        super().__init__(
            (TrainScriptArguments, MaxEntGRPOConfig, ModelConfig),
            prog=f"{PROG} train",
            description="Train with MaxEntGRPOTrainer. '--config recipe.yaml' reads field: value pairs from a YAML "
            "recipe; '--field value' arguments override them. Fields: the script arguments below, every field of "
            "MaxEntGRPOConfig (TRL's GRPOConfig plus the MaxEnt and generation fields), then TRL's ModelConfig "
            "(model_name_or_path, dtype, attn_implementation, model_revision, use_peft and the LoRA fields).",
        )

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _read_recipe(path: str) -> dict[str, Any]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot read recipe {path!r}: {error.strerror or error}") from error
    except UnicodeDecodeError as error:
        raise UsageError(f"recipe {path!r} is not UTF-8 text (byte 0x{error.object[error.start]:02x})") from error
    try:
        recipe = yaml.safe_load(text)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise UsageError(f"recipe {path!r} is not valid YAML{where}: {error.problem}") from error
    except yaml.YAMLError as error:
        raise UsageError(f"recipe {path!r} is not valid YAML: {error}") from error
    if not isinstance(recipe, dict):
        raise UsageError(f"recipe {path!r} must be a YAML mapping of field: value")
    return recipe


def _recipe_value(action: argparse.Action, key: str, value: Any, path: str) -> Any:
    """A recipe value converted and checked with the field's own argparse type and choices."""
    if value is None or isinstance(value, dict):
        return value
    if action.nargs in ("+", "*"):
        items = value if isinstance(value, list) else [value]
        return [_recipe_value_item(action, key, item, path) for item in items]
    if isinstance(value, list):
        raise UsageError(f"{key} in recipe {path!r} takes a single value, got the list {value!r}")
    return _recipe_value_item(action, key, value, path)


def _recipe_value_item(action: argparse.Action, key: str, value: Any, path: str) -> Any:
    try:
        converted = action.type(str(value)) if callable(action.type) else value
    except (TypeError, ValueError, argparse.ArgumentTypeError) as error:
        raise UsageError(f"{key}={value!r} in recipe {path!r} is invalid: {error}") from error
    if action.choices is not None and converted not in action.choices:
        # YAML reads unquoted yes / no / on / off as booleans: `save_strategy: no` arrives as False.
        hint = (
            " (quote the value: YAML reads an unquoted yes/no/on/off as a boolean)" if isinstance(value, bool) else ""
        )
        raise UsageError(
            f"{key}={value!r} in recipe {path!r} is invalid: expected one of {list(action.choices)}{hint}"
        )
    return converted


def _apply_recipe(parser: RecipeParser, path: str) -> None:
    """Make the recipe's values the parser's defaults; unknown fields and values of the wrong type are errors."""
    recipe = _read_recipe(path)
    env = recipe.pop("env", {})  # TRL's recipe convention: environment variables for the run
    if not isinstance(env, dict):
        raise UsageError(f"env in recipe {path!r} must be a mapping of variable: value")
    os.environ.update({str(name): str(value) for name, value in env.items()})
    actions: dict[str, argparse.Action] = {}
    for action in parser._actions:
        actions.setdefault(action.dest, action)  # the field's own option comes before its --no_<field> twin
    defaults = {}
    for key, value in recipe.items():
        if key not in actions or key == "help":
            raise UsageError(
                f"unknown field {key!r} in recipe {path!r}: not a field of MaxEntGRPOConfig, ModelConfig or the "
                "train script arguments (maxent-grpo train --help lists them)"
            )
        defaults[key] = _recipe_value(actions[key], key, value, path)
    parser.set_defaults_with_config(**defaults)


def parse_train_args(argv: Sequence[str]) -> tuple[TrainScriptArguments, MaxEntGRPOConfig, ModelConfig]:
    """`(TrainScriptArguments, MaxEntGRPOConfig, ModelConfig)` from ``[--config recipe.yaml] [--field value ...]``.

    Raises:
        UsageError: missing or malformed recipe, unknown field, value of the wrong type, or a value the config
            rejects (its `ValueError` names the field).
    """
    from maxent_grpo.cli import script_args as inputs

    parser = RecipeParser()
    args = list(argv)
    if "--config" in args:
        index = args.index("--config")
        if index + 1 >= len(args):
            raise UsageError("--config needs the path of a YAML recipe")
        _apply_recipe(parser, args[index + 1])
        del args[index : index + 2]
    try:
        script_args, config, model_args, remaining = parser.parse_args_into_dataclasses(
            args=args, return_remaining_strings=True
        )
    except ValueError as error:  # a dataclass's own validation (MaxEntGRPOConfig, TrainingArguments, ModelConfig)
        raise UsageError(str(error)) from error
    if remaining:
        raise UsageError(
            f"unknown argument {remaining[0]!r}: not a field of MaxEntGRPOConfig, ModelConfig or the train script "
            "arguments (maxent-grpo train --help lists them)"
        )
    inputs.check_required(script_args, model_args)
    return script_args, config, model_args
