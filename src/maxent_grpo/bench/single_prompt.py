"""One-prompt tasks of the CPU benchmarks: MaxEnt listwise against stock GRPO and TRL's options on the tiny model.

`benchmarks/mode_coverage.py` and `benchmarks/pass_at_k.py` train every arm of
`maxent_grpo.bench.trl_baselines.ARMS` from the same seeded initialisation on one prompt with several correct answers:
stock TRL GRPO, the TRL options against collapse of `maxent_grpo.bench.trl_baselines` (a fixed entropy bonus chosen
on a grid, the adaptive bonus, top-entropy tokens) and MaxEnt listwise. The task lives here: its fixed settings, its
two trainers, the sampling of answers after training (`SinglePromptTask`) and the command-line options the scripts
share (`add_run_arguments`, `add_arm_arguments`, `check_arguments`). The order of the runs is
`maxent_grpo.bench.single_prompt_arms.run_arms`, the plain-words comparison of MaxEnt with each TRL arm
`maxent_grpo.bench.per_seed_comparison`; their rewards, answer evaluation, tables and plots stay in the scripts.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from transformers import PreTrainedModel, PreTrainedTokenizerBase
from trl import GRPOTrainer

from maxent_grpo.bench import held_out
from maxent_grpo.bench.config_override import maxent_override
from maxent_grpo.bench.cpu_trainer import TRAINERS, build_trainer, trainer_kind, training_fields
from maxent_grpo.bench.entropy_grid_option import add_entropy_grid_argument
from maxent_grpo.bench.step_recorder import StepRecorder
from maxent_grpo.bench.trl_baselines import ARMS
from maxent_grpo.config import MaxEntGRPOConfig
from maxent_grpo.tiny_model import build_tiny_model, build_tiny_tokenizer

__all__ = [
    "METHODS",
    "SCHEDULE_FIELDS",
    "SinglePromptTask",
    "StepRecorder",
    "add_arm_arguments",
    "add_run_arguments",
    "check_arguments",
    "selected_methods",
]

#: The two trainers a method key names, in the order `maxent-grpo demo` runs them
#: (`maxent_grpo.bench.cpu_trainer.TRAINERS`).
METHODS = TRAINERS

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


@dataclass(frozen=True)
class SinglePromptTask:
    """One prompt as the whole dataset, one group of ``num_generations`` completions per step, on the CPU.

    ``alphabet`` is the tiny tokenizer's character set (None: printable ASCII); ``maxent_settings`` are the
    `MaxEntGRPOConfig` fields the MaxEnt runs add to ``maxent_objective="listwise"`` and ``maxent_mode_key``.
    """

    prompt: str
    mode_key: str
    alphabet: str | None = None
    maxent_settings: Mapping[str, Any] = field(default_factory=dict)
    num_generations: int = 16
    learning_rate: float = 3e-3
    hidden_size: int = 64
    num_layers: int = 1
    max_completion_length: int = 2
    temperature: float = 1.0
    beta: float = 0.0

    def maxent_run_settings(self, maxent: Mapping[str, Any]) -> dict[str, Any]:
        """The MaxEnt fields a run with the overrides ``maxent`` uses: the schedule's defaults, the task's settings."""
        defaults = {name: getattr(MaxEntGRPOConfig, name) for name in SCHEDULE_FIELDS}
        return {"maxent_mode_key": self.mode_key, **defaults, **self.maxent_settings, **maxent}

    def training_settings(self) -> dict[str, Any]:
        """The fixed training settings both methods run with, as the benchmarks' JSON records them."""
        return {
            "num_generations": self.num_generations,
            "learning_rate": self.learning_rate,
            "beta": self.beta,
            "hidden_size": self.hidden_size,
            "num_layers": self.num_layers,
            "max_completion_length": self.max_completion_length,
            "temperature": self.temperature,
        }

    def build_trainer(
        self,
        method: str,
        seed: int,
        steps: int,
        maxent: Mapping[str, Any],
        output_dir: str,
        recorder: StepRecorder,
        reporting: Mapping[str, Any] | None = None,
        trl_fields: Mapping[str, Any] | None = None,
    ) -> GRPOTrainer:
        """A stock TRL GRPO or MaxEnt listwise trainer (by `maxent_grpo.bench.cpu_trainer.trainer_kind` of
        ``method``) from the seed's model.

        Args:
            method: ``"maxent"``, ``"grpo"`` or a ``grpo_`` arm's key (a GRPO trainer with ``trl_fields``).
            seed: the seed of the model's initialisation and of the run.
            steps: optimizer steps (one group of ``num_generations`` completions each).
            maxent: overrides of the MaxEnt config's fields (on top of ``maxent_settings``); a GRPO run ignores them.
            output_dir: the trainer's output folder.
            recorder: the reward function, which records every scored group.
            reporting: overrides of the quiet logging both trainers run with by default (``report_to="none"``, one
                log at the end), e.g. ``{"report_to": "trackio", "logging_steps": 1, "run_name": ...}``.
            trl_fields: `GRPOConfig` fields the run adds to the task's settings, e.g. a TRL arm's
                ``{"entropy_coef": 0.05}`` (see `maxent_grpo.bench.trl_baselines`).

        Returns:
            The trainer, not yet trained, with TRL's printing callback removed.
        """
        kind = trainer_kind(method)
        tokenizer = build_tiny_tokenizer(self.alphabet)
        model = build_tiny_model(
            tokenizer,
            seed=seed,
            hidden_size=self.hidden_size,
            num_layers=self.num_layers,
            max_completion_length=self.max_completion_length,
        )
        fields = training_fields(
            output_dir,
            batch_size=self.num_generations,
            num_generations=self.num_generations,
            completion_length=self.max_completion_length,
            temperature=self.temperature,
            steps=steps,
            learning_rate=self.learning_rate,
            beta=self.beta,
            seed=seed,
        )
        fields |= {**(reporting or {}), **(trl_fields or {})}
        if kind == "maxent":
            fields |= {"maxent_objective": "listwise", "maxent_mode_key": self.mode_key, **self.maxent_settings}
            fields |= maxent
        return build_trainer(kind, model, tokenizer, recorder, fields, [self.prompt] * self.num_generations)

    def sample_answers(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, num_samples: int, seed: int
    ) -> list[str]:
        """``num_samples`` completions of the prompt, sampled as in training; the global RNG is left untouched."""
        (answers,) = held_out.sample(
            model,
            tokenizer,
            [self.prompt],
            num_samples,
            seed,
            max_new_tokens=self.max_completion_length,
            temperature=self.temperature,
        )
        return answers

    def train_and_sample(
        self,
        method: str,
        seed: int,
        steps: int,
        maxent: Mapping[str, Any],
        recorder: StepRecorder,
        trl_fields: Mapping[str, Any],
        num_samples: int,
    ) -> list[str]:
        """Train the trainer of `build_trainer` in a scratch output folder, then `sample_answers` of its model:
        ``num_samples`` answers with the sampling seed ``1000 + seed``."""
        with tempfile.TemporaryDirectory() as output_dir:
            trainer = self.build_trainer(method, seed, steps, maxent, output_dir, recorder, trl_fields=trl_fields)
            trainer.train()
        return self.sample_answers(trainer.model, trainer.processing_class, num_samples, 1000 + seed)
