"""The configuration reference of the docs, rendered from the dataclasses (`maxent-grpo config-reference`).

It lists the fields `MaxEntGRPOConfig` itself defines (TRL's own fields are documented by TRL) and the script
arguments of `maxent-grpo train`, each with its type, default and help text. ``--write`` replaces the block between
the markers of a Markdown file, `REFERENCE_PAGE` in this repository.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

from trl import ModelConfig, ScriptArguments

from maxent_grpo.cli.script_args import TrainScriptArguments
from maxent_grpo.config import MaxEntGRPOConfig

START_MARKER = "<!-- config-reference:start -->"
END_MARKER = "<!-- config-reference:end -->"
#: The docs page that holds the reference, relative to the repository root.
REFERENCE_PAGE = "docs/configuration.md"
COMMAND = f"maxent-grpo config-reference --write {REFERENCE_PAGE}"


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell: pipes and asterisks escaped, one line."""
    return " ".join(text.split()).replace("|", "\\|").replace("*", "\\*")


def _default(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        return f"`{field.default!r}`"
    if field.default_factory is not dataclasses.MISSING:
        return f"`{field.default_factory()!r}`"
    return "required"


def fields_table(cls: type) -> str:
    """A Markdown table of the dataclass fields that ``cls`` itself annotates (inherited ones are left out)."""
    own = inspect.get_annotations(cls)
    rows = ["| field | type | default | description |", "|---|---|---|---|"]
    for field in dataclasses.fields(cls):
        if field.name in own:
            annotation, default, help_text = (
                _cell(str(own[field.name])),
                _default(field),
                field.metadata.get("help", ""),
            )
            rows.append(f"| `{field.name}` | `{annotation}` | {_cell(default)} | {_cell(help_text)} |")
    return "\n".join(rows)


def field_names(cls: type) -> str:
    """The fields of dataclass ``cls``, as a comma-separated list of Markdown code spans."""
    return ", ".join(f"`{field.name}`" for field in dataclasses.fields(cls))


def render_config_reference() -> str:
    """The Markdown that goes between the config-reference markers of `REFERENCE_PAGE`."""
    return "\n".join(
        [
            f"<!-- generated from the dataclasses by `{COMMAND}`; edit the field help texts, not this block -->",
            "",
            "`MaxEntGRPOConfig` takes every field of TRL's `GRPOConfig` (and of `transformers.TrainingArguments`), "
            "with TRL's meaning, plus these:",
            "",
            fields_table(MaxEntGRPOConfig),
            "",
            "`maxent-grpo train` also takes, in a recipe or as `--field value`, the fields of TRL's `ScriptArguments` "
            f"({field_names(ScriptArguments)}) and of TRL's `ModelConfig` ({field_names(ModelConfig)}), with TRL's "
            "meaning (`dataset_name` may also be a local file or 'vowels', `model_name_or_path` also 'tiny' or "
            "'smollm2'), plus these script arguments:",
            "",
            fields_table(TrainScriptArguments),
        ]
    )


def _block_span(text: str) -> tuple[int, int]:
    """Start and end offsets of the text between the markers; ValueError when they are missing."""
    start, end = text.find(START_MARKER), text.find(END_MARKER)
    if start == -1 or end < start:
        raise ValueError(f"no '{START_MARKER}' ... '{END_MARKER}' block found")
    return start + len(START_MARKER), end


def current_block(text: str) -> str:
    """What ``text`` holds between the config-reference markers (stripped)."""
    start, end = _block_span(text)
    return text[start:end].strip()


def replace_block(text: str, block: str) -> str:
    """``text`` with everything between the config-reference markers replaced by ``block``."""
    start, end = _block_span(text)
    return f"{text[:start]}\n{block}\n{text[end:]}"


def write_config_reference(path: str | Path) -> bool:
    """Rewrite the marked block of the Markdown file at ``path``; returns whether the file changed."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    updated = replace_block(text, render_config_reference())
    if updated != text:
        path.write_text(updated, encoding="utf-8")
    return updated != text
