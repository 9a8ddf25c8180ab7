"""`maxent-grpo train`'s arguments: a YAML recipe and `--field value` overrides, parsed the way TRL's scripts do.

TRL's `TrlParser` over `TrainScriptArguments` (TRL's `ScriptArguments` plus the reward and column fields),
`MaxEntGRPOConfig` and TRL's `ModelConfig`; command-line values win over the recipe. Every recipe value goes through
its field's own argparse type and choices, so a bad value is one `UsageError` naming the field and the recipe.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from trl import ModelConfig, TrlParser

from maxent_grpo.cli.usage_error import PROG, UsageError, UsageErrorParser

if TYPE_CHECKING:
    from maxent_grpo.cli.script_args import TrainScriptArguments
    from maxent_grpo.config import MaxEntGRPOConfig

FIELDS_HINT = (
    "maxent-grpo config-reference lists the MaxEnt fields and the script arguments; the other fields are TRL's "
    "GRPOConfig and ModelConfig"
)


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a mapping that sets one key twice (plain YAML keeps the last value silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    problem=f"{key!r} is set twice (lines {seen[key]} and {line}); keep one",
                    problem_mark=key_node.start_mark,
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


class RecipeParser(TrlParser, UsageErrorParser):
    """TRL's parser over the train script arguments, `MaxEntGRPOConfig` and `ModelConfig`; bad arguments raise
    `UsageError`, a bad choice with "did you mean" (`UsageErrorParser`). Its help is ``maxent-grpo train
    --help-all`` (``--help`` is `train_help`'s short list)."""

    def __init__(self) -> None:
        from maxent_grpo.cli.script_args import TrainScriptArguments
        from maxent_grpo.cli.train_help import HELP_ALL_OPTION, HELP_OPTIONS, USAGE
        from maxent_grpo.config import MaxEntGRPOConfig

        super().__init__(
            (TrainScriptArguments, MaxEntGRPOConfig, ModelConfig),
            prog=f"{PROG} train",
            usage=USAGE,
            add_help=False,
            description="Train with MaxEntGRPOTrainer. '--config recipe.yaml' reads field: value pairs from a YAML "
            "recipe; '--field value' arguments override them. Fields: the script arguments below, every field of "
            "MaxEntGRPOConfig (TRL's GRPOConfig plus the MaxEnt and generation fields), then TRL's ModelConfig "
            "(model_name_or_path, dtype, attn_implementation, model_revision, use_peft and the LoRA fields).",
            epilog=f"{FIELDS_HINT}.",
        )
        # Documented here, read before this parser runs (`parse_train_args`, `command`): never in its namespace.
        options = self.add_argument_group("recipe and help")
        options.add_argument(
            "--config", metavar="RECIPE.yaml", default=argparse.SUPPRESS, help="YAML recipe of field: value pairs"
        )
        options.add_argument(*HELP_OPTIONS, action="store_true", default=argparse.SUPPRESS, help="the common fields")
        options.add_argument(HELP_ALL_OPTION, action="store_true", default=argparse.SUPPRESS, help="this list")
        self._action_groups.insert(0, self._action_groups.pop())  # listed first in the help


def _read_recipe(path: str) -> dict[str, Any]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot read recipe {path!r}: {error.strerror or error}") from error
    except UnicodeDecodeError as error:
        raise UsageError(f"recipe {path!r} is not UTF-8 text (byte 0x{error.object[error.start]:02x})") from error
    try:
        recipe = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise UsageError(f"recipe {path!r} is not valid YAML{where}: {error.problem}") from error
    except yaml.YAMLError as error:
        raise UsageError(f"recipe {path!r} is not valid YAML: {error}") from error
    if not isinstance(recipe, dict):
        raise UsageError(f"recipe {path!r} must be a YAML mapping of field: value")
    return recipe


def _field_types(parser: RecipeParser) -> dict[str, Any]:
    """The annotated type of every field of the parser's dataclasses, by name."""
    types_by_name: dict[str, Any] = {}
    for dataclass_type in parser.dataclass_types:
        hints = typing.get_type_hints(dataclass_type)
        for spec in dataclasses.fields(dataclass_type):
            types_by_name.setdefault(spec.name, None if spec.default is None else hints[spec.name])
    return types_by_name


def _accepts(annotation: Any, kind: type) -> bool:
    """Whether a field of type ``annotation`` (None: its default is None) takes a value of type ``kind``."""
    if annotation is None:
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_accepts(member, kind) for member in typing.get_args(annotation))
    return (typing.get_origin(annotation) or annotation) in (kind, Any)


def _recipe_value(action: argparse.Action, key: str, value: Any, path: str, annotation: Any) -> Any:
    """A recipe value converted and checked with the field's own argparse type and choices."""
    if value is None or isinstance(value, dict):
        kind = type(None) if value is None else dict
        if not _accepts(annotation, kind):
            what = "null" if value is None else "a mapping"
            expected = getattr(annotation, "__name__", str(annotation))
            raise UsageError(f"{key}={value!r} in recipe {path!r} is invalid: expected a {expected} value, not {what}")
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
    field_types = _field_types(parser)
    defaults = {}
    for key, value in recipe.items():
        if key not in field_types:
            raise UsageError(f"unknown field {key!r} in recipe {path!r}: {_unknown_field_hint(str(key), field_types)}")
        defaults[key] = _recipe_value(actions[key], key, value, path, field_types[key])
    parser.set_defaults_with_config(**defaults)


def _unknown_field_hint(name: str, field_types: dict[str, Any]) -> str:
    """What to say about an unknown field: the closest field names, and where the fields are listed."""
    close = difflib.get_close_matches(name, list(field_types), n=3)
    guess = f"; did you mean {' or '.join(repr(match) for match in close)}?" if close else ""
    return f"not a field of MaxEntGRPOConfig, ModelConfig or the train script arguments{guess} ({FIELDS_HINT})"


#: What `train` cannot do without, optional in TRL's dataclasses.
REQUIRED_FIELDS = ("model_name_or_path", "dataset_name")


def missing_required_message(missing: Sequence[str], recipe: str | None) -> str:
    """The error for required fields left unset (``missing``, as ``--field``), given the recipe path or None."""
    names = ", ".join(missing)
    if recipe is not None:
        return f"the following arguments are required: {names} (recipe {recipe!r} does not set them either)"
    return (
        f"the following arguments are required: {names}, or a recipe that sets them (--config recipe.yaml, such as "
        f"configs/recipes/demo.yaml); 'tiny' and 'vowels' are the built-in offline model and data set, and "
        f"'{PROG} train --help' lists the common fields"
    )


def check_required(script_args: TrainScriptArguments, model_args: ModelConfig, recipe: str | None = None) -> None:
    """`model_name_or_path` and `dataset_name`, optional in TRL's dataclasses, are what `train` cannot do without
    (``recipe``: the path of the recipe read, or None, for the message)."""
    given = {"model_name_or_path": model_args.model_name_or_path, "dataset_name": script_args.dataset_name}
    missing = [f"--{name}" for name, value in given.items() if value is None]
    if missing:
        raise UsageError(missing_required_message(missing, recipe))


def split_recipe(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """The recipe path of ``--config PATH`` (or ``--config=PATH``), None without one, and the other arguments.

    Raises:
        UsageError: ``--config`` without a path, or given twice.
    """
    args = list(argv)
    found = [i for i, arg in enumerate(args) if arg == "--config" or arg.startswith("--config=")]
    if not found:
        return None, args
    if len(found) > 1:
        raise UsageError("--config is given twice: give one recipe (fields on the command line override it)")
    index = found[0]
    if args[index] != "--config":
        path = args.pop(index).partition("=")[2]
    elif index + 1 < len(args):
        path = args.pop(index + 1)
        args.pop(index)
    else:
        path = ""
    if not path:
        raise UsageError("--config needs the path of a YAML recipe")
    return path, args


def named_fields(recipe_path: str | None, args: Sequence[str], fields: Sequence[str]) -> set[str]:
    """Those of ``fields`` that the recipe at ``recipe_path`` sets (to a value other than null) or that ``args`` name.

    An option names a field when it is the field's name (or its dashed twin, ``--dataset-name``) or, as argparse takes
    abbreviations, the start of one.

    Raises:
        UsageError: a recipe that cannot be read.
    """
    given: set[str] = set()
    if recipe_path is not None:
        given.update(str(key) for key, value in _read_recipe(recipe_path).items() if value is not None)
    for arg in args:
        name = arg.removeprefix("--").partition("=")[0].replace("-", "_") if arg.startswith("--") else ""
        if name:
            given.update(field for field in fields if field.startswith(name))
    return given & set(fields)


def check_required_named(recipe_path: str | None, args: Sequence[str]) -> None:
    """Refuse a command line that names no model or no data set, neither in its arguments ``args`` nor in the
    recipe at ``recipe_path``, before TRL's parser is built (which imports torch, transformers and TRL, and would
    first refuse TRL's default bf16 on a machine without a GPU). Reads the recipe, sets nothing.

    An option counts as given as `named_fields` says; the exact check is `check_required`, after parsing.

    Raises:
        UsageError: naming the missing fields, or a recipe that cannot be read.
    """
    given = named_fields(recipe_path, args, REQUIRED_FIELDS)
    missing = [f"--{field}" for field in REQUIRED_FIELDS if field not in given]
    if missing:
        raise UsageError(missing_required_message(missing, recipe_path))


def parse_train_args(argv: Sequence[str]) -> tuple[TrainScriptArguments, MaxEntGRPOConfig, ModelConfig]:
    """`(TrainScriptArguments, MaxEntGRPOConfig, ModelConfig)` from ``[--config recipe.yaml] [--field value ...]``.

    Raises:
        UsageError: no model or data set named (`check_required_named`, before the heavy parser is built), missing
            or malformed recipe, unknown field, value of the wrong type, or a value the config rejects (its
            `ValueError` names the field).
    """

    recipe_path, args = split_recipe(argv)
    check_required_named(recipe_path, args)
    parser = RecipeParser()
    if recipe_path is not None:
        _apply_recipe(parser, recipe_path)
    try:
        script_args, config, model_args, remaining = parser.parse_args_into_dataclasses(
            args=args, return_remaining_strings=True
        )
    except ValueError as error:  # a dataclass's own validation (MaxEntGRPOConfig, TrainingArguments, ModelConfig)
        raise UsageError(str(error)) from error
    if remaining:
        name = remaining[0].removeprefix("--").partition("=")[0]
        raise UsageError(f"unknown argument {remaining[0]!r}: {_unknown_field_hint(name, _field_types(parser))}")
    check_required(script_args, model_args, recipe_path)
    return script_args, config, model_args
