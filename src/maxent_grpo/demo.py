"""The embedded default (`maxent-grpo demo`): MaxEnt-GRPO on a tiny model, tokenizer and data set built in-process.

The mode-coverage task: every prompt is "pick a vowel:" and a completion earns 1.0 when its first non-whitespace
character is a lower-case vowel. Five answers are equally right, so a good policy answers with a vowel *and* keeps all
five in use. The listwise objective with the ``first_token`` mode key spreads each group's target weight over its
distinct answers (a vowel sampled once weighs as much as one sampled ten times), which keeps the five vowels alive
while the reward rises. Everything runs offline on CPU; the run is logged locally with trackio.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from tqdm.auto import tqdm
from transformers import (
    PreTrainedModel,
    PreTrainedTokenizerBase,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)
from transformers.trainer_callback import ProgressCallback

from maxent_grpo.config import MaxEntGRPOConfig
from maxent_grpo.rewards import VOWELS, first_character, vowel_start_reward
from maxent_grpo.tiny_model import build_tiny_model, build_tiny_tokenizer
from maxent_grpo.trainer import MaxEntGRPOTrainer

VOWEL_PROMPT = "pick a vowel:"
TRACKIO_PROJECT = "maxent-grpo-demo"
DEFAULT_STEPS = 80
EVAL_SAMPLES = 256

# The task's training settings; configs/recipes/demo.yaml repeats them (tests/unit/test_recipes.py keeps them equal).
GROUP_SIZE = 16
COMPLETION_LENGTH = 4
LEARNING_RATE = 1e-2
TAU = 0.3


def vowel_dataset(num_prompts: int) -> Dataset:
    """``num_prompts`` copies of the mode-coverage prompt."""
    return Dataset.from_dict({"prompt": [VOWEL_PROMPT] * num_prompts})


@dataclass(frozen=True)
class AnswerStats:
    """What a policy answers to the vowel prompt, measured on sampled completions."""

    mean_reward: float  # fraction of completions that start with a lower-case vowel
    coverage: float  # entropy of the first-character distribution over the 5 vowels / log 5, in [0, 1]
    distinct_vowels: int  # vowels that start at least one completion


def answer_stats(completions: Sequence[str]) -> AnswerStats:
    """Mean reward, normalized vowel entropy and number of distinct vowels of ``completions``."""
    answers = [first_character(text) for text in completions]
    counts = Counter(answer for answer in answers if answer in set(VOWELS))
    total = sum(counts.values())
    entropy = -sum(n / total * math.log(n / total) for n in counts.values()) if total else 0.0
    rewards = vowel_start_reward(list(completions))
    return AnswerStats(
        mean_reward=sum(rewards) / len(rewards) if rewards else 0.0,
        coverage=entropy / math.log(len(VOWELS)),
        distinct_vowels=len(counts),
    )


@torch.no_grad()
def sample_answers(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, num_samples: int, seed: int
) -> list[str]:
    """``num_samples`` completions of the vowel prompt, sampled as in training; the global RNG is left untouched."""
    inputs = tokenizer([VOWEL_PROMPT] * num_samples, return_tensors="pt").to(model.device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        output = model.generate(
            **inputs,
            do_sample=True,
            max_new_tokens=COMPLETION_LENGTH,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    return tokenizer.batch_decode(output[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)


def demo_config(output_dir: str | Path, steps: int, seed: int, report_to: str) -> MaxEntGRPOConfig:
    """The demo's training configuration: groups of 16, 4-token completions, listwise over first characters."""
    return MaxEntGRPOConfig(
        output_dir=str(output_dir),
        per_device_train_batch_size=GROUP_SIZE,
        num_generations=GROUP_SIZE,
        max_completion_length=COMPLETION_LENGTH,
        max_steps=steps,
        learning_rate=LEARNING_RATE,
        maxent_objective="listwise",
        maxent_mode_key="first_token",
        maxent_tau=TAU,
        logging_steps=1,
        save_strategy="no",
        use_cpu=True,
        seed=seed,
        report_to=report_to,
        project=TRACKIO_PROJECT,
        trackio_static_space_id=False,  # never sync to the Hub: the run stays in trackio's local directory
    )


class RewardProgressBar(TrainerCallback):
    """A progress bar over training steps that shows the latest mean reward instead of printing every log.

    When stderr is not a terminal (a log file), a line every tenth of the run instead: a bar redraws itself with
    carriage returns, which a log file keeps as one ever-growing line.
    """

    def __init__(self) -> None:
        self.bar: tqdm | None = None
        self.lines = not sys.stderr.isatty()

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if state.is_world_process_zero and not self.lines:
            self.bar = tqdm(total=state.max_steps, desc="training", unit="step", dynamic_ncols=True)

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self.bar is not None:
            self.bar.update(state.global_step - self.bar.n)

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        if not logs or "reward" not in logs:
            return
        if self.lines:
            step, tenth = state.global_step, max(state.max_steps // 10, 1)
            if state.is_world_process_zero and (step % tenth == 0 or step >= state.max_steps):
                share = 100 * state.global_step // state.max_steps
                print(
                    f"training: {share}% ({state.global_step}/{state.max_steps} steps), reward={logs['reward']:.2f}",
                    file=sys.stderr,
                )
            return
        if self.bar is None:
            return
        self.bar.set_postfix(reward=f"{logs['reward']:.2f}")
        if state.global_step >= state.max_steps:  # the last step's log: close before the loggers' closing words
            self.bar.close()
            self.bar = None


@dataclass(frozen=True)
class DemoResult:
    before: AnswerStats
    after: AnswerStats
    steps: int
    seconds: float


def run_demo(steps: int, seed: int, trackio: bool, save_to: Path | None = None) -> DemoResult:
    """Build the tiny model, measure it, train it for ``steps`` steps and measure it again.

    With ``save_to``, the trained model and tokenizer are saved there; otherwise nothing outlives the call except
    trackio's local record of the run (when ``trackio`` is set).
    """
    if trackio:  # the demo always logs locally, whatever remote trackio target the environment names
        for variable in ("TRACKIO_SPACE_ID", "TRACKIO_SERVER_URL"):
            os.environ.pop(variable, None)
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, seed=seed, max_completion_length=COMPLETION_LENGTH)
    before = answer_stats(sample_answers(model, tokenizer, EVAL_SAMPLES, seed))
    with tempfile.TemporaryDirectory(prefix="maxent-grpo-demo-") as scratch:
        trainer = MaxEntGRPOTrainer(
            model=model,
            reward_funcs=vowel_start_reward,
            args=demo_config(save_to or scratch, steps, seed, "trackio" if trackio else "none"),
            train_dataset=vowel_dataset(steps * GROUP_SIZE),
            processing_class=tokenizer,
        )
        trainer.remove_callback(ProgressCallback)
        trainer.add_callback(RewardProgressBar())
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
    if save_to is not None:
        trainer.save_model(str(save_to))
    after = answer_stats(sample_answers(trainer.model, tokenizer, EVAL_SAMPLES, seed))
    return DemoResult(before=before, after=after, steps=steps, seconds=seconds)


def format_table(result: DemoResult) -> str:
    """The before / after table the demo prints."""
    before, after = result.before, result.after
    rows = [
        ("mean reward", f"{before.mean_reward:.2f}", f"{after.mean_reward:.2f}"),
        ("answer coverage", f"{before.coverage:.2f}", f"{after.coverage:.2f}"),
        ("distinct vowels", f"{before.distinct_vowels}/{len(VOWELS)}", f"{after.distinct_vowels}/{len(VOWELS)}"),
    ]
    lines = [f"{'':<17}{'before':>8}{'after':>8}"]
    lines += [f"{name:<17}{old:>8}{new:>8}" for name, old, new in rows]
    return "\n".join(lines)
