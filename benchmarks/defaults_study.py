"""Defaults study: does MaxEnt at its config defaults keep GRPO's accuracy and every correct answer, task by task?

The targets, per task: MaxEnt's mean reward of the sampled answers at most 0.01 below stock GRPO's (paired by seed),
and an answer entropy of at least 0.95 (the entropy of the correct answers' empirical distribution over ln of their
number: 1.0 is every correct answer equally often). The tasks are the single-prompt tasks of
`maxent_grpo_experiments.answer_tasks`, each trained from the same seeded tiny model by every arm:

- ``vowel``: "pick a vowel:", five correct one-character answers, 2-token completions (the mode-coverage task);
- ``four``: "pick 1, 2, 3 or 4:", four correct one-token answers, 1-token completions; no setting of the objective
  was ever chosen on it;
- ``digits``: "10=", nine correct two-digit answers out of a hundred (the pass@k task).

The arms: stock TRL ``GRPOTrainer`` (``grpo``), and `MaxEntGRPOTrainer` with ``maxent_objective="listwise"``, the
task's mode key (``first_token``, or ``last_line`` for the digits) and, per variant, the fields it names on top of
the config defaults. The variants (``--variant NAME FIELD=VALUE ...``, fields of the objective's ``maxent_*`` only,
replaces all but ``defaults``):

- ``defaults``: nothing else set (tau annealed from 0.25 to 0.003 over the run, ``maxent_mode_probability="count"``);
- ``policy``: ``maxent_mode_probability="policy"`` (the setting of the pass@k benchmark);
- ``policy_clip_4``: ``policy`` with the correction truncated at 4 instead of the group size (16), a middle way
  between the two estimates;
- ``policy_fixed_tau``: ``policy`` with tau held at 0.25 (``maxent_tau_final=null`` on the command line), the
  variant of the pass@k page that kept the most digit answers.

Every run uses one group of 16 completions per step, learning rate 3e-3 with TRL's linear decay, beta 0, sampling
temperature 1.0, 300 steps; after training ``--samples`` answers (default 512) are sampled with the seed ``1000 +
seed``. Per task and variant the script reports the reward minus GRPO's, paired by seed, with its 95% t interval, and
the answer entropy with its interval. The reward target reads *within* when the interval's low end is at least
-0.01, *below* when its high end is under -0.01, *undecided* otherwise (also with one seed, which gives no
interval); the entropy target *met* when the mean over seeds is at least 0.95. The intervals are t intervals, not
clipped to [0, 1].

    python benchmarks/defaults_study.py [--seeds 5] [--steps 300] [--samples 512] [--workers 1]
                                        [--tasks TASK ...] [--variant NAME [FIELD=VALUE ...]] ...
                                        [--output-dir DIR | --update-results]

``--workers N`` runs N seeds side by side in forked processes (each seed's runs do not depend on the others, so the
figures are those of one process; `maxent_grpo_experiments.seed_processes`). It writes ``defaults_study.json``
(settings with the MaxEnt fields each variant ran with on each task, every run, per task and arm the figures over
seeds, per task and variant the paired reward difference and both verdicts, per variant the targets it misses) and
``defaults_study.png`` (per task: reward minus GRPO's against answer entropy, one point per variant with its
intervals, the target region shaded) into ``outputs/benchmarks/defaults_study`` (``--update-results``: the committed
``benchmarks/results/defaults_study``, which docs/benchmarks/defaults.md shows). With the defaults it takes about 6
minutes on 2 idle CPU cores with ``--workers 2`` (75 runs of 300 steps).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch
from transformers.utils import logging as hf_logging

from maxent_grpo.bench.output import add_output_arguments
from maxent_grpo.config import MaxEntGRPOConfig
from maxent_grpo_experiments.answer_tasks import TASKS
from maxent_grpo_experiments.config_override import maxent_override
from maxent_grpo_experiments.over_seeds import format_difference, paired_differences, summarize_runs
from maxent_grpo_experiments.seed_processes import map_seeds
from maxent_grpo_experiments.single_prompt import maxent_run_settings, train_and_sample, training_settings
from maxent_grpo_experiments.step_recorder import StepRecorder

COMMITTED_OUTPUT_DIR = Path(__file__).resolve().parent / "results" / "defaults_study"
#: The targets of the study: reward at most this far below GRPO's, and at least this answer entropy.
REWARD_GAP = 0.01
ENTROPY_TARGET = 0.95
#: The MaxEnt variants run when no ``--variant`` is given; ``defaults`` runs always.
VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "policy": {"maxent_mode_probability": "policy"},
    "policy_clip_4": {"maxent_mode_probability": "policy", "maxent_mode_correction_clip": 4},
    "policy_fixed_tau": {"maxent_mode_probability": "policy", "maxent_tau_final": None},
}
FIGURES = ("mean_reward", "normalized_entropy", "distinct_correct")
#: The fields a variant may set and the JSON records per variant: the MaxEnt objective's own (``maxent_*``) but
#: ``maxent_objective``, which every variant has at "listwise". Training settings stay those of the task, as GRPO's.
VARIANT_FIELDS = tuple(
    f.name
    for f in dataclasses.fields(MaxEntGRPOConfig)
    if f.name.startswith("maxent_") and f.name != "maxent_objective"
)


def parse_variant(items: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """``NAME FIELD=VALUE ...`` of one ``--variant``: its name and its `MaxEntGRPOConfig` overrides.

    Raises:
        argparse.ArgumentTypeError: an empty name, a name with ``=``, the name ``grpo`` or ``defaults`` (the arms that
            always run), an item that is not ``FIELD=VALUE``, a field that is not one of `VARIANT_FIELDS` (a training
            setting would break the pairing with GRPO), or a field given twice.
    """
    name, *items = items
    if not name or "=" in name or name in ("grpo", "defaults"):
        raise argparse.ArgumentTypeError(
            f"a variant starts with its name (not empty, 'grpo' or 'defaults', without '='), got {name!r}"
        )
    overrides: dict[str, Any] = {}
    for item in items:
        field_name, value = maxent_override(item)
        if field_name not in VARIANT_FIELDS:
            raise argparse.ArgumentTypeError(
                f"variant {name!r}: {field_name!r} is not one of the objective's maxent_* fields (maxent_objective "
                "neither)"
            )
        if field_name in overrides:
            raise argparse.ArgumentTypeError(f"variant {name!r} sets {field_name} twice")
        overrides[field_name] = value
    return name, overrides


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line, with ``variants`` (name -> overrides, ``defaults`` first) for the raw ``--variant`` lists.

    Bad input exits through ``parser.error``.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps per run (one group each)")
    parser.add_argument("--seeds", type=int, default=5, help="number of seeds (0 .. seeds-1) per arm and task")
    parser.add_argument("--samples", type=int, default=512, help="answers sampled per trained model")
    parser.add_argument("--workers", type=int, default=1, help="seeds run side by side in forked processes")
    parser.add_argument(
        "--tasks", nargs="+", choices=TASKS, default=list(TASKS), metavar="TASK", help="of %(choices)s (default: all)"
    )
    parser.add_argument(
        "--variant",
        nargs="+",
        action="append",
        default=[],
        metavar=("NAME", "FIELD=VALUE"),
        help="a MaxEnt variant: its name, then maxent_* field overrides (a value is read as JSON when it parses, so "
        "null for None, else as text); repeatable; replaces the built-in variants but 'defaults'",
    )
    add_output_arguments(parser, "defaults_study", COMMITTED_OUTPUT_DIR)
    args = parser.parse_args(argv)
    if min(args.seeds, args.steps, args.samples, args.workers) < 1:
        parser.error("--seeds, --steps, --samples and --workers must be at least 1")
    try:
        named = [parse_variant(items) for items in args.variant]
    except argparse.ArgumentTypeError as error:
        parser.error(str(error))
    names = [name for name, _ in named]
    if len(set(names)) != len(names):
        parser.error(f"--variant names must differ, got {names}")
    args.variants = {"defaults": {}, **dict(named)} if named else dict(VARIANTS)
    args.tasks = list(dict.fromkeys(args.tasks))
    return args


def variant_settings(task: str, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Every field of `VARIANT_FIELDS` a variant runs with on ``task``: the config default, unless the task or
    ``overrides`` sets it (the record of what "the defaults" were)."""
    defaults = {name: getattr(MaxEntGRPOConfig, name) for name in VARIANT_FIELDS}
    return {**defaults, **maxent_run_settings(TASKS[task].task, overrides)}


def run_seed(seed: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every task's GRPO run and variant runs on ``seed``, each with its figures and seconds."""
    runs = []
    for name in args.tasks:
        answer_task = TASKS[name]
        for method, overrides in {"grpo": {}, **args.variants}.items():
            started = time.perf_counter()
            recorder = StepRecorder(answer_task.reward)
            kind = "grpo" if method == "grpo" else "maxent"
            answers = train_and_sample(answer_task.task, kind, seed, args.steps, overrides, recorder, {}, args.samples)
            figures = answer_task.evaluate(answers)
            seconds = time.perf_counter() - started
            print(
                f"seed {seed} {name:<6} {method:<18} {seconds:5.1f}s: reward {figures['mean_reward']:.3f}, "
                f"entropy {figures['normalized_entropy']:.3f}, {figures['distinct_correct']} distinct correct",
                flush=True,
            )
            runs.append({"task": name, "method": method, "seed": seed, **figures, "seconds": seconds})
    return runs


def reward_verdict(difference: Mapping[str, Any]) -> str:
    """``within`` / ``below`` / ``undecided`` of the reward target for a paired difference to GRPO (``undecided``
    without an interval: one seed decides nothing)."""
    if difference["ci95"] is None:
        return "undecided"
    low, high = difference["ci95"]
    if low >= -REWARD_GAP:
        return "within"
    if high < -REWARD_GAP:
        return "below"
    return "undecided"


def analyse(runs: Sequence[Mapping[str, Any]], tasks: Sequence[str], variants: Sequence[str]) -> dict[str, Any]:
    """Per task the figures of every arm over seeds; per task and variant the paired reward difference to GRPO and
    the two verdicts; per variant the targets it misses."""
    summary: dict[str, Any] = {}
    versus: dict[str, Any] = {}
    misses: dict[str, list[str]] = {variant: [] for variant in variants}
    for task in tasks:
        task_runs = [r for r in runs if r["task"] == task]
        summary[task] = {
            method: summarize_runs([r for r in task_runs if r["method"] == method], FIGURES)
            for method in ("grpo", *variants)
        }
        versus[task] = {}
        for variant in variants:
            difference = paired_differences(task_runs, variant, "mean_reward")["grpo"]
            entropy = summary[task][variant]["normalized_entropy"]
            row = {
                "reward_minus_grpo": difference,
                "reward": reward_verdict(difference),
                "entropy": "met" if entropy >= ENTROPY_TARGET else "not met",
            }
            versus[task][variant] = row
            if row["reward"] != "within":
                gap = format_difference(difference)
                misses[variant].append(f"{task}: reward {gap} against GRPO ({row['reward']})")
            if row["entropy"] != "met":
                misses[variant].append(f"{task}: answer entropy {entropy:.3f} < {ENTROPY_TARGET}")
    return {"summary": summary, "versus_grpo": versus, "misses": misses}


def plot(result: Mapping[str, Any], path: Path) -> None:
    """Per task: reward minus GRPO's (paired, 95% interval) against answer entropy (95% interval), per variant."""
    tasks = list(result["summary"])
    figure, axes = plt.subplots(1, len(tasks), figsize=(4.6 * len(tasks), 4.4), squeeze=False)
    for axis, task in zip(axes[0], tasks, strict=True):
        target = {"color": "tab:green", "alpha": 0.15, "label": "targets"}
        axis.fill_between([ENTROPY_TARGET, 1.02], -REWARD_GAP, REWARD_GAP, **target)
        for index, (variant, row) in enumerate(result["versus_grpo"][task].items()):
            figures = result["summary"][task][variant]
            x, y = figures["normalized_entropy"], row["reward_minus_grpo"]["mean"]
            x_ci = figures["normalized_entropy_ci95"] or [x, x]
            y_ci = row["reward_minus_grpo"]["ci95"] or [y, y]
            error = {"xerr": [[x - x_ci[0]], [x_ci[1] - x]], "yerr": [[y - y_ci[0]], [y_ci[1] - y]]}
            axis.errorbar(x, y, **error, fmt="o", color=f"C{index}", capsize=3, label=variant)
        grpo = result["summary"][task]["grpo"]["normalized_entropy"]
        axis.axvline(grpo, color="grey", linestyle=":", label=f"GRPO's entropy ({grpo:.2f})")
        axis.set(title=task, xlabel="answer entropy (normalized)", ylabel="reward minus GRPO's", xlim=(-0.02, 1.02))
        axis.grid(alpha=0.3)
        axis.legend(loc="best", fontsize="x-small")
    figure.suptitle("MaxEnt variants against stock GRPO: mean over seeds, bars = 95% intervals (reward paired)")
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the study, print the table and each variant's misses, write the JSON and the PNG; return the JSON."""
    args = parse_args(argv)
    hf_logging.set_verbosity_error()
    args.output_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    per_seed = map_seeds(lambda seed: run_seed(seed, args), range(args.seeds), args.workers)
    runs = [run for seed_runs in per_seed for run in seed_runs]
    result = {
        "settings": {
            "steps": args.steps,
            "seeds": list(range(args.seeds)),
            "samples": args.samples,
            "targets": {"reward_minus_grpo_at_least": -REWARD_GAP, "normalized_entropy_at_least": ENTROPY_TARGET},
            "tasks": {
                name: {
                    "prompt": TASKS[name].task.prompt,
                    "mode_key": TASKS[name].task.mode_key,
                    "correct": sorted(TASKS[name].correct),
                    **training_settings(TASKS[name].task),
                }
                for name in args.tasks
            },
            "workers": args.workers,
            "variants": args.variants,
            "variant_settings": {
                task: {variant: variant_settings(task, overrides) for variant, overrides in args.variants.items()}
                for task in args.tasks
            },
        },
        "runs": runs,
        **analyse(runs, args.tasks, list(args.variants)),
        "seconds": time.perf_counter() - started,
    }
    print(f"\n{'task':<7} {'arm':<18} {'reward':>7} {'reward - GRPO [95% CI]':>36} {'entropy [95% CI]':>24} distinct")
    for task in args.tasks:
        for method, figures in result["summary"][task].items():
            row = result["versus_grpo"][task].get(method)
            gap = f"{format_difference(row['reward_minus_grpo'])} {row['reward']:<9}" if row else ""
            ci = figures["normalized_entropy_ci95"]
            entropy = f"{figures['normalized_entropy']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
            print(
                f"{task:<7} {method:<18} {figures['mean_reward']:7.3f} {gap:>36} {entropy:>24} "
                f"{figures['distinct_correct']:8.2f}"
            )
    for variant, missed in result["misses"].items():
        print(f"{variant}: " + ("meets both targets on every task" if not missed else "misses " + "; ".join(missed)))
    (args.output_dir / "defaults_study.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, args.output_dir / "defaults_study.png")
    print(f"wrote {args.output_dir} in {result['seconds']:.0f} s")
    return result


if __name__ == "__main__":
    torch.set_num_threads(1)  # the model is tiny: more threads only add contention on a small machine
    main()
