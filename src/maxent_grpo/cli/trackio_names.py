"""The trackio project and run of a `maxent-grpo train` run, named as the demo names its runs.

transformers logs to trackio's project ``huggingface`` under a random run name unless ``project`` and ``run_name``
are set. Unless the recipe or the command line sets them, a run that reports to trackio goes to the project
``maxent-grpo-<recipe>`` (the recipe file's name without its suffix; without a recipe, the ``output_dir`` folder's
name) as the run ``<output_dir folder>-<date>-<time>``, the demo's ``maxent-grpo-demo`` and ``maxent-seed0-<time>``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from maxent_grpo.cli.recipe import named_fields
from maxent_grpo.config import MaxEntGRPOConfig

#: The start of every project name given here, and the whole name when nothing else names the run.
PROJECT_PREFIX = "maxent-grpo"


def name_trackio_run(config: MaxEntGRPOConfig, recipe_path: str | None, args: Sequence[str]) -> None:
    """Set ``config.project`` and ``config.run_name`` for trackio, those that neither the recipe at ``recipe_path``
    nor ``args`` set, when ``config.report_to`` includes trackio."""
    if "trackio" not in (config.report_to or []):
        return
    given = named_fields(recipe_path, args, ("project", "run_name"))
    folder = Path(config.output_dir).resolve().name
    if "project" not in given:
        source = Path(recipe_path).stem if recipe_path is not None else folder
        config.project = f"{PROJECT_PREFIX}-{source}" if source else PROJECT_PREFIX
    if "run_name" not in given:
        config.run_name = f"{folder or PROJECT_PREFIX}-{time.strftime('%Y%m%d-%H%M%S')}"
