"""One-prompt tasks of the CPU benchmarks: stock GRPO against MaxEnt listwise on the tiny offline model.

`benchmarks/mode_coverage.py` and `benchmarks/pass_at_k.py` train both methods from the same seeded initialisation
on one prompt with several correct answers. What they share lives here: the task's fixed settings, the two trainers,
the per-step record of the scored groups and the sampling of answers after training. Their rewards, answer
evaluation, tables and plots stay in the scripts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from datasets import Dataset
from transformers import PreTrainedModel, PreTrainedTokenizerBase, PrinterCallback
from trl import GRPOConfig, GRPOTrainer

from maxent_grpo.config import MaxEntGRPOConfig
from maxent_grpo.tiny_model import build_tiny_model, build_tiny_tokenizer
from maxent_grpo.trainer import MaxEntGRPOTrainer

#: The compared methods, in the order runs are interleaved per seed: stock TRL GRPO, then MaxEnt listwise.
METHODS = ("grpo", "maxent")

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


#: Steps of the trailing moving average the benchmarks' reward curves are drawn with (and summarised over).
SMOOTHING_WINDOW = 10


def smooth(values: Sequence[float], window: int) -> list[float]:
    """Trailing moving average over up to ``window`` values."""
    return [statistics.fmean(values[max(0, i + 1 - window) : i + 1]) for i in range(len(values))]


def add_run_arguments(parser: argparse.ArgumentParser, maxent_help: str) -> None:
    """The command-line options every single-prompt benchmark has: ``--steps``, ``--seeds`` and ``--maxent``."""
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps per run (one group each)")
    parser.add_argument("--seeds", type=int, default=3, help="number of seeds (0 .. seeds-1) per method")
    parser.add_argument(
        "--maxent", action="append", type=maxent_override, default=[], metavar="FIELD=VALUE", help=maxent_help
    )


def maxent_override(item: str) -> tuple[str, Any]:
    """One ``--maxent FIELD=VALUE`` config override, as an argparse type.

    VALUE is read as JSON when it parses (numbers, null), else as text.
    """
    name, sep, value = item.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected FIELD=VALUE, got {item!r}")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value


class StepRecorder:
    """Reward function wrapper that records, for every scored group, the mean reward and each of ``group_metrics``.

    ``group_metrics`` maps a name to a function of the group's completions; its values land in ``metrics[name]``.
    """

    def __init__(
        self,
        reward_func: Callable[..., list[float]],
        group_metrics: Mapping[str, Callable[[list], float]] | None = None,
    ) -> None:
        self.reward_func = reward_func
        self.__name__ = reward_func.__name__
        self.group_metrics = dict(group_metrics or {})
        self.rewards: list[float] = []
        self.metrics: dict[str, list[float]] = {name: [] for name in self.group_metrics}

    def __call__(self, completions: list, **kwargs: Any) -> list[float]:
        rewards = self.reward_func(completions=completions, **kwargs)
        self.rewards.append(statistics.fmean(rewards))
        for name, metric in self.group_metrics.items():
            self.metrics[name].append(metric(completions))
        return rewards


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
    ) -> GRPOTrainer:
        """A stock GRPO (``method="grpo"``) or MaxEnt listwise trainer from the seed's model initialisation.

        ``maxent`` overrides fields of the MaxEnt config (on top of ``maxent_settings``); the GRPO run ignores it.
        ``reporting`` overrides the quiet logging both methods run with by default (``report_to="none"``, one log at
        the end), e.g. ``{"report_to": "trackio", "logging_steps": 1, "run_name": ...}``.
        """
        tokenizer = build_tiny_tokenizer(self.alphabet)
        model = build_tiny_model(
            tokenizer,
            seed=seed,
            hidden_size=self.hidden_size,
            num_layers=self.num_layers,
            max_completion_length=self.max_completion_length,
        )
        fields: dict[str, Any] = {
            "output_dir": output_dir,
            "per_device_train_batch_size": self.num_generations,
            "num_generations": self.num_generations,
            "max_completion_length": self.max_completion_length,
            "temperature": self.temperature,
            "max_steps": steps,
            "learning_rate": self.learning_rate,
            "beta": self.beta,
            "logging_steps": steps,
            "save_strategy": "no",
            "report_to": "none",
            "use_cpu": True,
            "seed": seed,
            "dataloader_num_workers": 0,
            "disable_tqdm": True,
            **(reporting or {}),
        }
        dataset = Dataset.from_dict({"prompt": [self.prompt] * self.num_generations})
        if method == "grpo":
            trainer_class, args = GRPOTrainer, GRPOConfig(**fields)
        else:
            settings = {
                "maxent_objective": "listwise",
                "maxent_mode_key": self.mode_key,
                **self.maxent_settings,
                **maxent,
            }
            trainer_class, args = MaxEntGRPOTrainer, MaxEntGRPOConfig(**fields, **settings)
        trainer = trainer_class(
            model=model, reward_funcs=recorder, args=args, train_dataset=dataset, processing_class=tokenizer
        )
        trainer.remove_callback(PrinterCallback)
        return trainer

    def train(
        self, method: str, seed: int, steps: int, maxent: Mapping[str, Any], recorder: StepRecorder
    ) -> GRPOTrainer:
        """Build the trainer of `build_trainer` in a scratch output folder, train it and return it."""
        with tempfile.TemporaryDirectory() as output_dir:
            trainer = self.build_trainer(method, seed, steps, maxent, output_dir, recorder)
            trainer.train()
        return trainer

    @torch.no_grad()
    def sample_answers(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, num_samples: int, seed: int
    ) -> list[str]:
        """``num_samples`` completions of the prompt, sampled as in training; the global RNG is left untouched."""
        model.eval()
        prompt_ids = torch.tensor([tokenizer(self.prompt)["input_ids"]] * num_samples, device=model.device)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            output = model.generate(
                input_ids=prompt_ids,
                attention_mask=torch.ones_like(prompt_ids),
                do_sample=True,
                max_new_tokens=self.max_completion_length,
                temperature=self.temperature,
                top_k=0,
                top_p=1.0,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )
        return tokenizer.batch_decode(output[:, prompt_ids.shape[1] :], skip_special_tokens=True)
