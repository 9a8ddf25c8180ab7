"""``maxent-grpo bench``: an A/B benchmark of trainers on one recipe over several seeds, with a verdict per metric.

Runs every arm with the same recipe for seeds 1..N, interleaved (A B A B ...) so machine drift hits every arm alike,
each run logged to a local trackio project under a name that says which arm, seed and recipe it is. Then reports, per
metric, each arm's mean with its 95% interval over seeds and each arm's difference from the first arm, paired by seed,
with a verdict against the metric's equivalence margin (--margin): "identical on every seed", "equivalent within ±m"
(the 90% interval inside the margin), "differs" (the 95% interval excludes 0) or "inconclusive" (with the seeds that
would likely decide it).

The statistics (SciPy) and the plot (matplotlib) come with the ``bench`` extra; the report modules that import them
are imported once `maxent_grpo.bench.extra` has found them, so that a missing one is a one-line error.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from trackio.utils import TRACKIO_DIR
from trl import GRPOConfig

from maxent_grpo.bench.arms import ARMS
from maxent_grpo.bench.extra import INSTALL_HINT, missing_modules
from maxent_grpo.bench.margins import Margin, margins
from maxent_grpo.bench.metrics import METRICS
from maxent_grpo.bench.output import add_output_arguments
from maxent_grpo.bench.provenance import git_commit, git_dirty, package_version, run_name, session_stamp
from maxent_grpo.bench.recipes import RECIPES, Recipe
from maxent_grpo.bench.runner import interleave, run_all, worker_environment
from maxent_grpo.bench.spec import RunSpec
from maxent_grpo.cli.usage_error import UsageErrorParser

#: The committed results of the default run, relative to a source checkout's root (`--update-results`).
COMMITTED_OUTPUT_DIR = Path("benchmarks/results/ab")
DEFAULT_PROJECT = "maxent-grpo-ab"
SUMMARY_JSON = "summary.json"
SUMMARY_MARKDOWN = "summary.md"
PLOT_PNG = "metrics.png"
_CONFIG_FIELDS = frozenset(field.name for field in dataclasses.fields(GRPOConfig))


def _say(line: str) -> None:
    print(line, flush=True)


def build_parser() -> argparse.ArgumentParser:
    """The command's arguments; a bad one raises `UsageError` (``maxent-grpo bench`` prints it on one line)."""
    parser = UsageErrorParser(
        prog="maxent-grpo bench",
        description=__doc__.split("\n\n")[1],
    )
    parser.add_argument(
        "--arms",
        default="before,after",
        help=f"comma-separated arms, the first is the baseline; choices: "
        f"{'; '.join(f'{arm.name} ({arm.description})' for arm in ARMS.values())} (default: %(default)s)",
    )
    parser.add_argument(
        "--seeds", type=int, default=3, help="runs per arm, with seeds 1..N, at least 2 (default: %(default)s)"
    )
    parser.add_argument(
        "--recipe",
        choices=sorted(RECIPES),
        default="tiny",
        help="tiny: the TRL PR benchmark's shape on the offline tiny model (CPU); smollm2: that shape on the real "
        "SmolLM2-135M-Instruct with vLLM colocate (CPU, vllm and the smollm2 extra); "
        "tldr: the PR benchmark itself, Qwen3-0.6B-Base on trl-lib/tldr with vLLM colocate (GPU, hub access) "
        "(default: %(default)s)",
    )
    parser.add_argument("--max-steps", type=int, help="optimizer steps per run (default: the recipe's)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a GRPOConfig field of the recipe for every arm (VALUE parsed as JSON, else a string); "
        "repeatable",
    )
    parser.add_argument(
        "--margin",
        dest="margins",
        action="append",
        default=[],
        metavar="METRIC=VALUE",
        help="equivalence margin of a metric (its name or label): a number in its unit, or a percentage of the "
        "baseline arm's mean, e.g. --margin reward=0.01 --margin 'step time (s)=2%%'; repeatable; defaults: "
        + ", ".join(f"{metric.label}={metric.default_margin.replace('%', '%%')}" for metric in METRICS),
    )
    parser.add_argument(
        "--warmup-steps",
        type=int,
        default=1,
        help="first optimizer steps left out of each run's mean (default: %(default)s)",
    )
    add_output_arguments(parser, "ab", COMMITTED_OUTPUT_DIR)
    parser.add_argument(
        "--project", default=DEFAULT_PROJECT, help="trackio project of the runs (default: %(default)s)"
    )
    parser.add_argument(
        "--trackio-dir",
        type=Path,
        help="local trackio storage directory (default: trackio's own, TRACKIO_DIR or $HF_HOME/trackio)",
    )
    return parser


def _parse_overrides(parser: argparse.ArgumentParser, items: list[str]) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    for item in items:
        key, separator, text = item.partition("=")
        if not separator or key not in _CONFIG_FIELDS:
            parser.error(f"--set {item!r}: expected FIELD=VALUE with FIELD a GRPOConfig field.")
        try:
            overrides[key] = json.loads(text)
        except json.JSONDecodeError:
            overrides[key] = text
    return overrides


def _recipe(parser: argparse.ArgumentParser, options: argparse.Namespace) -> Recipe:
    overrides = _parse_overrides(parser, options.overrides)
    if options.max_steps is not None:
        overrides["max_steps"] = options.max_steps
    try:
        recipe = RECIPES[options.recipe].with_training_overrides(overrides)
    except ValueError as error:
        parser.error(str(error))
    max_steps = recipe.training.get("max_steps", -1)
    if 0 < max_steps <= options.warmup_steps:
        parser.error(f"max_steps={max_steps} leaves no step after --warmup-steps {options.warmup_steps}.")
    return recipe


def _arms(parser: argparse.ArgumentParser, text: str) -> list[str]:
    arms = [arm.strip() for arm in text.split(",") if arm.strip()]
    unknown = [arm for arm in arms if arm not in ARMS]
    if unknown or len(set(arms)) != len(arms) or len(arms) < 2:
        parser.error(f"--arms {text!r}: expected at least two distinct arms among {sorted(ARMS)}.")
    return arms


def _margins(parser: argparse.ArgumentParser, items: list[str]) -> dict[str, Margin]:
    try:
        return margins(items)
    except ValueError as error:
        parser.error(str(error))


def main(argv: list[str]) -> int:
    """Run the benchmark described by ``argv`` and write summary.json, summary.md and metrics.png.

    Raises:
        UsageError: a bad argument, or a library of the ``bench`` extra missing (`maxent_grpo.cli.main` prints it
            on one line and exits 2).
    """
    parser = build_parser()
    options = parser.parse_args(argv)
    arms = _arms(parser, options.arms)
    chosen_margins = _margins(parser, options.margins)
    if options.seeds < 2:
        parser.error("--seeds must be at least 2: run-to-run variance needs repeated runs.")
    if options.warmup_steps < 0:
        parser.error("--warmup-steps must be >= 0.")
    if options.output_dir == COMMITTED_OUTPUT_DIR and not COMMITTED_OUTPUT_DIR.parent.is_dir():
        parser.error(f"--update-results writes {COMMITTED_OUTPUT_DIR} of a source checkout: run from its root.")
    missing = missing_modules()
    if missing:
        parser.error(f"the benchmark needs {' and '.join(missing)}, not installed here: {INSTALL_HINT}.")
    from maxent_grpo.bench.plot import plot_metrics
    from maxent_grpo.bench.report import build_summary, markdown, verdict_lines

    recipe = _recipe(parser, options)
    seeds = list(range(1, options.seeds + 1))
    trackio_dir = options.trackio_dir or TRACKIO_DIR
    recipe_hash = recipe.content_hash()
    session = session_stamp()
    header: dict[str, Any] = {
        "argv": list(argv),
        "project": options.project,
        "session": session,
        "trackio_dir": str(trackio_dir.resolve()),
        "recipe": recipe.to_dict(),
        "recipe_hash": recipe_hash,
        "package_version": package_version(),
        "git_commit": git_commit(),
        "git_dirty": git_dirty(),
        "seeds": seeds,
    }
    specs = []
    for arm, seed in interleave(arms, seeds):
        metadata = {
            "arm": arm,
            "trainer_class": ARMS[arm].trainer_path,
            "package_version": header["package_version"],
            "git_commit": header["git_commit"],
            "git_dirty": header["git_dirty"],
            "seed": seed,
            "recipe_name": recipe.name,
            "recipe_hash": recipe_hash,
            "session": session,
        }
        specs.append(RunSpec(arm, seed, recipe, options.project, run_name(arm, seed, recipe_hash, session), metadata))

    _say(
        f"{len(specs)} runs ({', '.join(arms)} x seeds {seeds[0]}..{seeds[-1]}, interleaved), recipe {recipe.name} "
        f"({recipe_hash[:8]}), trackio project {options.project!r} in {header['trackio_dir']}"
    )
    start = time.perf_counter()
    results = run_all(specs, worker_environment(options.trackio_dir), report=_say)
    header["wall_seconds"] = time.perf_counter() - start

    summary = build_summary(results, arms, options.warmup_steps, chosen_margins, header)
    options.output_dir.mkdir(parents=True, exist_ok=True)
    (options.output_dir / SUMMARY_JSON).write_text(json.dumps(summary, indent=1) + "\n")
    (options.output_dir / SUMMARY_MARKDOWN).write_text(markdown(summary))
    plot_metrics(summary, options.output_dir / PLOT_PNG)
    _say("")
    _say("\n".join(verdict_lines(summary)))
    _say(
        f"\nWrote {SUMMARY_JSON}, {SUMMARY_MARKDOWN} and {PLOT_PNG} to {options.output_dir}; dashboard: "
        f"TRACKIO_DIR={header['trackio_dir']} trackio show --project {options.project}"
    )
    return 0
