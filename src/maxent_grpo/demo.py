"""The embedded default (`maxent-grpo demo`): stock GRPO against MaxEnt listwise on a tiny model built in-process.

The mode-coverage task: every prompt is "pick a vowel:" and a completion earns 1.0 when its first non-whitespace
character is a lower-case vowel. Five answers are equally right, so a good policy answers with a vowel *and* keeps all
five in use. Both methods train from the same seeded initialisation with the same budget
(`maxent_grpo.single_prompt_task`), the settings of `benchmarks/mode_coverage.py`. GRPO gives every correct sample of a
group the same advantage, so the vowel it happens to sample most gains most; the listwise objective with the
``first_token`` mode key spreads each group's target weight over its distinct answers (a vowel sampled once weighs as
much as one sampled ten times), which keeps the five vowels alive while the reward rises. Everything runs offline on
CPU; both runs are logged locally with trackio.
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

from datasets import Dataset
from tqdm.auto import tqdm
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from maxent_grpo.rewards import VOWELS, first_character, vowel_start_reward
from maxent_grpo.single_prompt_task import METHODS, SinglePromptTask

VOWEL_PROMPT = "pick a vowel:"
TRACKIO_PROJECT = "maxent-grpo-demo"
DEFAULT_STEPS = 300
EVAL_SAMPLES = 512
OTHER = "other"
LABELS = {"grpo": "GRPO (stock TRL)", "maxent": "MaxEnt listwise"}
NEXT_COMMAND = "maxent-grpo train --config configs/recipes/demo.yaml"

#: The mode-coverage benchmark's task: one group of 16 two-token completions per step, MaxEnt at the config defaults
#: (tau annealed from 0.25 to 0.003 over the run) with the entropy over first characters.
TASK = SinglePromptTask(prompt=VOWEL_PROMPT, mode_key="first_token")


def vowel_dataset(num_prompts: int) -> Dataset:
    """``num_prompts`` copies of the mode-coverage prompt."""
    return Dataset.from_dict({"prompt": [VOWEL_PROMPT] * num_prompts})


@dataclass(frozen=True)
class AnswerStats:
    """What a policy answers to the vowel prompt, measured on sampled completions."""

    mean_reward: float  # fraction of completions that start with a lower-case vowel
    coverage: float  # entropy of the first-character distribution over the 5 vowels / log 5, in [0, 1]
    counts: dict[str, int]  # completions per first vowel, in the order of VOWELS, then OTHER for the rest

    @property
    def distinct_vowels(self) -> int:
        """Vowels that start at least one completion."""
        return sum(self.counts[vowel] > 0 for vowel in VOWELS)


def answer_stats(completions: Sequence[str]) -> AnswerStats:
    """Mean reward, normalized vowel entropy and first-vowel counts of ``completions``."""
    answers = Counter(first_character(text) for text in completions)
    counts = {vowel: answers[vowel] for vowel in VOWELS}
    total = sum(counts.values())
    entropy = -sum(n / total * math.log(n / total) for n in counts.values() if n)
    counts[OTHER] = len(completions) - total
    rewards = vowel_start_reward(list(completions))
    return AnswerStats(
        mean_reward=sum(rewards) / len(rewards) if rewards else 0.0,
        coverage=entropy / math.log(len(VOWELS)),
        counts=counts,
    )


class RewardProgressBar(TrainerCallback):
    """A progress bar over training steps that shows the latest mean reward instead of printing every log.

    When stderr is not a terminal (a log file), a line every tenth of the run instead: a bar redraws itself with
    carriage returns, which a log file keeps as one ever-growing line.
    """

    def __init__(self, label: str) -> None:
        self.label = label
        self.bar: tqdm | None = None
        self.lines = not sys.stderr.isatty()

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if state.is_world_process_zero and not self.lines:
            self.bar = tqdm(total=state.max_steps, desc=self.label, unit="step", dynamic_ncols=True)

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
                    f"{self.label}: {share}% ({state.global_step}/{state.max_steps} steps), "
                    f"reward={logs['reward']:.2f}",
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
    before: AnswerStats  # the untrained model both methods start from
    after: dict[str, AnswerStats]  # per method of METHODS
    run_names: dict[str, str]  # trackio's name of each method's run
    steps: int
    seconds: float  # training time of both methods together


def run_demo(steps: int, seed: int, trackio: bool, save_to: Path | None = None) -> DemoResult:
    """Train stock GRPO and MaxEnt listwise for ``steps`` steps each from the same seed; measure the answers.

    With ``save_to``, each trained model and its tokenizer are saved in ``save_to / <method>``; otherwise nothing
    outlives the call except trackio's local record of the two runs (when ``trackio`` is set).
    """
    if trackio:  # the demo always logs locally, whatever remote trackio target the environment names
        for variable in ("TRACKIO_SPACE_ID", "TRACKIO_SERVER_URL"):
            os.environ.pop(variable, None)
    untrained, tokenizer = TASK.untrained_model(seed)
    before = answer_stats(TASK.sample_answers(untrained, tokenizer, EVAL_SAMPLES, seed))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_names = {method: f"{method}-seed{seed}-{stamp}" for method in METHODS}
    after: dict[str, AnswerStats] = {}
    seconds = 0.0
    for method in METHODS:
        reporting = {
            "report_to": "trackio" if trackio else "none",
            "logging_steps": 1,
            "run_name": run_names[method],
            "project": TRACKIO_PROJECT,
            "trackio_static_space_id": False,  # never sync to the Hub: the runs stay in trackio's local directory
        }
        with tempfile.TemporaryDirectory(prefix="maxent-grpo-demo-") as scratch:
            output_dir = str(save_to / method) if save_to is not None else scratch
            trainer = TASK.build_trainer(method, seed, steps, {}, output_dir, vowel_start_reward, reporting)
            trainer.add_callback(RewardProgressBar(LABELS[method]))
            start = time.perf_counter()
            trainer.train()
            seconds += time.perf_counter() - start
        if save_to is not None:
            trainer.save_model(output_dir)
        answers = TASK.sample_answers(trainer.model, trainer.processing_class, EVAL_SAMPLES, seed)
        after[method] = answer_stats(answers)
    return DemoResult(before=before, after=after, run_names=run_names, steps=steps, seconds=seconds)


def format_histogram(stats: AnswerStats, width: int = 40) -> list[str]:
    """One line per vowel (and OTHER): a bar of ``#`` whose full ``width`` is all sampled answers, and the count."""
    total = sum(stats.counts.values())
    lines = []
    for answer, count in stats.counts.items():
        bar = "#" * round(width * count / total) if total else ""
        lines.append(f"  {answer:<6}|{bar:<{width}}| {count:>4}")
    return lines


def format_report(result: DemoResult) -> str:
    """The reward and answer histogram of the untrained model and of each trained method."""
    blocks = [("untrained model (both methods start here)", result.before)]
    blocks += [(f"{LABELS[method]} after {result.steps} steps", result.after[method]) for method in METHODS]
    lines = []
    for title, stats in blocks:
        lines.append(
            f"{title}: reward {stats.mean_reward:.2f}, answer entropy {stats.coverage:.2f}, "
            f"vowels used {stats.distinct_vowels}/{len(VOWELS)}"
        )
        lines += format_histogram(stats)
        lines.append("")
    return "\n".join(lines[:-1])
