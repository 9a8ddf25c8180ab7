"""One-prompt tasks of the CPU benchmarks: MaxEnt listwise against stock GRPO and TRL's options on the tiny model.

`benchmarks/mode_coverage.py` and `benchmarks/pass_at_k.py` train every arm of
`maxent_grpo_experiments.trl_baselines.ARMS` from the same seeded initialisation on one prompt with several correct
answers (a `maxent_grpo.single_prompt_task.SinglePromptTask`): stock TRL GRPO, the TRL options against collapse of
`maxent_grpo_experiments.trl_baselines` (a fixed entropy bonus chosen on a grid, the adaptive bonus, top-entropy
tokens) and MaxEnt listwise. What the scripts share about such a task lives here: an arm's run and the answers sampled
after it (`train_and_sample`), the settings their JSON records (`training_settings`, `maxent_run_settings`) and the
command-line options (`add_run_arguments`, `add_arm_arguments`, `check_arguments`). The order of the runs is
`maxent_grpo_experiments.single_prompt_arms.run_arms`, the plain-words comparison of MaxEnt with each TRL arm
`maxent_grpo_experiments.per_seed_comparison`; their rewards, answer evaluation, tables and plots stay in the scripts.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from maxent_grpo.config import MaxEntGRPOConfig
from maxent_grpo.single_prompt_task import SinglePromptTask
from maxent_grpo_experiments.config_override import maxent_override
from maxent_grpo_experiments.entropy_grid_option import add_entropy_grid_argument
from maxent_grpo_experiments.step_recorder import StepRecorder
from maxent_grpo_experiments.trl_baselines import ARMS, trainer_kind

__all__ = [
    "SCHEDULE_FIELDS",
    "add_arm_arguments",
    "add_run_arguments",
    "check_arguments",
    "maxent_run_settings",
    "selected_methods",
    "train_and_sample",
    "training_settings",
]

#: The `MaxEntGRPOConfig` fields of the target's temperatures. The benchmarks leave them at the config defaults (tau
#: annealed geometrically from 0.25 to 0.003 over the whole run, reward softmax at temperature 1 without smoothing)
#: and record them with their figures; each task adds its mode key and, by the rule of `maxent_mode_probability`,
#: "policy" when an answer is one whole completion.
SCHEDULE_FIELDS = (
    "maxent_tau",
    "maxent_tau_final",
    "maxent_tau_anneal_fraction",
    "maxent_q_temperature",
    "maxent_q_epsilon",
)


def add_run_arguments(parser: argparse.ArgumentParser, maxent_help: str) -> None:
    """The command-line options every single-prompt benchmark has: ``--steps``, ``--seeds`` and ``--maxent``."""
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps per run (one group each)")
    parser.add_argument("--seeds", type=int, default=3, help="number of seeds (0 .. seeds-1) per method")
    parser.add_argument(
        "--maxent", action="append", type=maxent_override, default=[], metavar="FIELD=VALUE", help=maxent_help
    )


def add_arm_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that pick the arms: ``--methods`` (default: all of `ARMS`) and ``--entropy-grid``."""
    parser.add_argument(
        "--methods",
        nargs="+",
        choices=ARMS,
        default=list(ARMS),
        metavar="METHOD",
        help=f"arms to run, of {', '.join(ARMS)} (default: all)",
    )
    add_entropy_grid_argument(parser)


def selected_methods(methods: Sequence[str]) -> tuple[str, ...]:
    """``methods`` in the order of `ARMS`, each once.

    Raises:
        ValueError: for a key not in `ARMS`, none at all, or ``grpo_entropy_fixed`` without ``grpo`` (stock GRPO's
            reward is the reference of the coefficient's choice).
    """
    unknown = sorted(set(methods) - set(ARMS))
    if unknown or not methods:
        raise ValueError(f"methods must be a non-empty selection of {', '.join(ARMS)}, got {list(methods)}")
    if "grpo_entropy_fixed" in methods and "grpo" not in methods:
        raise ValueError("grpo_entropy_fixed needs grpo: its coefficient is chosen against stock GRPO's reward")
    return tuple(m for m in ARMS if m in methods)


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Put ``args.methods`` in the order of `ARMS` (`selected_methods`) and refuse a count below 1 of ``--seeds``,
    ``--steps`` or ``--samples``, through ``parser.error``."""
    try:
        args.methods = selected_methods(args.methods)
    except ValueError as error:
        parser.error(str(error))
    if args.seeds < 1 or args.steps < 1 or args.samples < 1:
        parser.error("--seeds, --steps and --samples must be at least 1")


def maxent_run_settings(task: SinglePromptTask, maxent: Mapping[str, Any]) -> dict[str, Any]:
    """The MaxEnt fields a run of ``task`` with the overrides ``maxent`` uses: the schedule's defaults, the task's
    settings, the overrides."""
    defaults = {name: getattr(MaxEntGRPOConfig, name) for name in SCHEDULE_FIELDS}
    return {"maxent_mode_key": task.mode_key, **defaults, **task.maxent_settings, **maxent}


def training_settings(task: SinglePromptTask) -> dict[str, Any]:
    """The fixed training settings every arm of ``task`` runs with, as the benchmarks' JSON records them."""
    return {
        "num_generations": task.num_generations,
        "learning_rate": task.learning_rate,
        "beta": task.beta,
        "hidden_size": task.hidden_size,
        "num_layers": task.num_layers,
        "max_completion_length": task.max_completion_length,
        "temperature": task.temperature,
    }


def train_and_sample(
    task: SinglePromptTask,
    method: str,
    seed: int,
    steps: int,
    maxent: Mapping[str, Any],
    recorder: StepRecorder,
    trl_fields: Mapping[str, Any],
    num_samples: int,
) -> list[str]:
    """Train the arm ``method`` of ``task`` (its trainer by `maxent_grpo_experiments.trl_baselines.trainer_kind`) in a
    scratch output folder, then sample ``num_samples`` answers of its model with the sampling seed ``1000 + seed``."""
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = task.build_trainer(
            trainer_kind(method), seed, steps, maxent, output_dir, recorder, trl_fields=trl_fields
        )
        trainer.train()
    return task.sample_answers(trainer.model, trainer.processing_class, num_samples, 1000 + seed)
