"""Mode coverage: stock GRPO collapses onto one correct answer; MaxEnt listwise and TRL's own options against it.

Task: the prompt "pick a vowel:" and a reward of 1 when the completion's first non-whitespace character is a
lower-case vowel (`vowel_start_reward`), so there are five equally good answers. The tiny offline Qwen2 model of
`maxent_grpo.tiny_model` (hidden size 64, one layer; character-level tokenizer, so the first token is the first
character) is trained from the same random initialisation per seed by five arms
(`maxent_grpo_experiments.trl_baselines`):

- ``grpo``: stock TRL `GRPOTrainer`;
- ``grpo_entropy_fixed``: GRPO with a fixed token-entropy bonus, ``entropy_coef`` = the best of the grid
  (``--entropy-grid``, default 0.01 0.02 0.05 0.1; see below);
- ``grpo_entropy``: GRPO with TRL's adaptive bonus (``entropy_coef=0.01``, ``use_adaptive_entropy=True``,
  ``entropy_target=1.0``, ``entropy_coef_max=0.1``);
- ``grpo_top_entropy``: GRPO with the loss on the top 20% tokens by entropy (``top_entropy_quantile=0.2``);
- ``maxent``: `MaxEntGRPOTrainer` with ``maxent_objective="listwise"``, ``maxent_mode_key="first_token"`` and
  nothing else: the config defaults (tau annealed from 0.25 to 0.003 over the whole run, ``maxent_q_temperature=1``,
  ``maxent_q_epsilon=0``, ``maxent_mode_probability="count"``, right here because a first character spans many
  completions), unless ``--maxent FIELD=VALUE`` overrides a field.

All use one group of 16 completions of at most 2 tokens per step (only the first character is scored), learning rate
3e-3 with TRL's default linear decay, beta 0, sampling temperature 1.0, 300 steps.

Reward and answer entropy are recorded at every step from the completions the trainer scores. After training,
512 answers are sampled from each model with the training generation settings; the figures of a model are their mean
reward and normalized answer entropy: the entropy of the empirical distribution of first characters restricted to
the five vowels, divided by ln 5 (1.0: all five vowels equally likely; 0.0: a single vowel).

The run has two phases, in one process. Grid phase: per seed, stock GRPO and GRPO with each fixed ``entropy_coef`` of
the grid. The coefficient is chosen as a TRL user tuning it would (`maxent_grpo_experiments.trl_baselines
.choose_fixed_coefficient`): the highest mean normalized vowel entropy among the coefficients whose mean reward is
at most 0.01 below stock GRPO's, else the highest reward; ties to the smaller coefficient. It is chosen on the seeds
it is reported on, which favours that arm. Main phase: per seed, the adaptive, top-entropy and MaxEnt arms (seed 0
all, seed 1 all, ...). Stock GRPO's grid runs and the chosen coefficient's are the ``grpo`` and ``grpo_entropy_fixed``
runs (same seeds and settings: not trained again). The script prints a line per run, the grid's figures, the
per-seed and mean table, and one sentence per TRL arm: MaxEnt is *ahead* (or *behind*) on reward or vowel entropy
when it is above (below) that arm on every seed by more than a margin (0.01 reward, 0.05 entropy), *level*
otherwise; with 3 seeds that describes the runs, it is no significance test.

    python benchmarks/mode_coverage.py [--steps 300] [--seeds 3] [--samples 512] [--maxent FIELD=VALUE ...]
                                       [--entropy-grid C [C ...]] [--methods METHOD [METHOD ...]]
                                       [--output-dir DIR | --update-results]

It writes ``mode_coverage.json`` (settings with the grid, the chosen coefficient and its rule; every run of the table
and of the grid; per-method means; per-coefficient means; MaxEnt's per-seed differences to each TRL arm and their
verdicts; mean curves) and ``mode_coverage.png`` (reward and normalized entropy over steps per arm, mean over seeds
with a min-max band) into the output directory (``outputs/benchmarks/mode_coverage`` by default;
``--update-results`` replaces the committed ``benchmarks/results/mode_coverage``, which the README and
docs/benchmarks/mode-coverage.md show). The per-step entropy is that of one group of 16 answers, so it reads lower
than the 512-sample figure (16 draws rarely cover five equally likely vowels evenly).

Expected result (the committed run, mean reward / vowel entropy over 3 seeds): every arm reaches a mean reward near 1.
GRPO gives every correct sample of a group the same advantage, so the vowel that happens to be sampled most gains
most, and once every completion of a group is correct its advantages vanish: it ends on one or two vowels (0.997 /
0.155). MaxEnt's mode form gives each distinct correct answer the same weight, so it keeps all five (0.994 / 0.997,
reward >= 0.99 and entropy >= 0.99 on every seed). Of TRL's options, the adaptive bonus stays at 0.628 and
``top_entropy_quantile`` collapses further (0.036); a fixed bonus tuned on the grid (0.1: 0.991 / 0.976; 0.05: 0.993
/ 0.950) comes level with MaxEnt at the end, later in the run. With a fixed tau of 0.25 and 4-token completions or
hidden size 32, MaxEnt's final reward is lower (about 0.93-0.96). Takes about 4 minutes on 2 CPU cores with the
defaults (24 runs of 300 steps, at 6-30 s each with start-up and sampling: 3 seeds x (stock GRPO + 4 grid
coefficients) in the grid phase, 3 x 3 arms in the main phase).
"""

from __future__ import annotations

import argparse
import json
import statistics
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
from maxent_grpo.rewards import VOWELS, first_character, vowel_start_reward
from maxent_grpo_experiments.answer_tasks import VOWEL
from maxent_grpo_experiments.per_seed_comparison import compare_with_maxent, comparison_lines
from maxent_grpo_experiments.single_prompt import (
    add_arm_arguments,
    add_run_arguments,
    check_arguments,
    maxent_run_settings,
    train_and_sample,
    training_settings,
)
from maxent_grpo_experiments.single_prompt_arms import RunOutput, run_arms
from maxent_grpo_experiments.smoothing import SMOOTHING_WINDOW, smooth
from maxent_grpo_experiments.step_recorder import StepRecorder
from maxent_grpo_experiments.trl_baselines import REWARD_TOLERANCE, TRL_LABELS

# Fixed settings of the experiment (the CLI exposes steps, seeds, MaxEnt overrides, samples, the arms, the entropy grid
# and the output directory).
# MaxEnt at the config defaults; a mode (the first character) spans many 2-token completions, so its probability under
# the policy is not known from the sampled ones and the group share estimates it (the default "count").
TASK = VOWEL.task
LABELS = {**TRL_LABELS, "maxent": "MaxEnt listwise (first_token modes)"}
#: Margins of the plain-words comparison of MaxEnt with each TRL arm (`comparison_lines`), per figure key.
MARGINS = {"mean_reward": REWARD_TOLERANCE, "normalized_entropy": 0.05}
COMMITTED_OUTPUT_DIR = Path(__file__).resolve().parent / "results" / "mode_coverage"


def first_characters(completions: Sequence[Any]) -> list[str]:
    """The answer of each completion: its first non-whitespace character ('' for a blank one)."""
    return [first_character(c) for c in completions]


def normalized_vowel_entropy(characters: Sequence[str]) -> float:
    """Entropy of the empirical distribution of the vowels among ``characters``, divided by ln 5 (0.0 if none)."""
    return VOWEL.evaluate(characters)["normalized_entropy"] if characters else 0.0


def group_vowel_entropy(completions: Sequence[Any]) -> float:
    """The normalized vowel entropy of a scored group's answers, recorded at every step."""
    return normalized_vowel_entropy(first_characters(completions))


def evaluate(answers: Sequence[str]) -> dict[str, Any]:
    """Mean reward, normalized vowel entropy and vowel counts of sampled answers."""
    figures = VOWEL.evaluate(answers)
    return {
        "mean_reward": figures["mean_reward"],
        "normalized_entropy": figures["normalized_entropy"],
        "vowel_counts": figures["answer_counts"],
    }


def plot_curves(curves: dict[str, dict[str, list[list[float]]]], labels: dict[str, str], path: Path) -> None:
    """Reward and normalized entropy over steps per arm: mean over seeds with a min-max band, smoothed."""
    figure, axes = plt.subplots(1, 2, figsize=(13, 4.6))
    titles = ("mean reward of the step's group", "normalized vowel entropy of the step's group")
    for axis, key, title in zip(axes, ("reward", "entropy"), titles, strict=True):
        for method, method_curves in curves.items():
            runs = [smooth(run, SMOOTHING_WINDOW) for run in method_curves[key]]
            steps = range(1, len(runs[0]) + 1)
            by_step = list(zip(*runs, strict=True))
            axis.plot(steps, [statistics.fmean(v) for v in by_step], label=labels[method])
            axis.fill_between(steps, [min(v) for v in by_step], [max(v) for v in by_step], alpha=0.15)
        axis.set_title(title)
        axis.set_xlabel("step")
        axis.set_ylim(-0.02, 1.02)
        axis.grid(alpha=0.3)
    axes[0].legend(loc="lower right", fontsize="small")
    figure.suptitle(
        f"pick a vowel (5 correct answers), {TASK.num_generations} completions per step: mean over seeds, "
        f"band = min-max over seeds, {SMOOTHING_WINDOW}-step moving average"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(parser, maxent_help="MaxEntGRPOConfig override, repeatable")
    parser.add_argument("--samples", type=int, default=512, help="answers sampled per trained model")
    add_arm_arguments(parser)
    add_output_arguments(parser, "mode_coverage", COMMITTED_OUTPUT_DIR)
    args = parser.parse_args(argv)
    check_arguments(parser, args)
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the experiment, print the summary, write the JSON and the PNG; return the JSON's content."""
    args = parse_args(argv)
    hf_logging.set_verbosity_error()
    args.output_dir.mkdir(parents=True, exist_ok=True)
    maxent = dict(args.maxent)
    started = time.perf_counter()

    def train(method: str, seed: int, trl_fields: Mapping[str, Any]) -> RunOutput:
        recorder = StepRecorder(vowel_start_reward, {"entropy": group_vowel_entropy})
        answers = train_and_sample(TASK, method, seed, args.steps, maxent, recorder, trl_fields, args.samples)
        return evaluate(answers), {"reward": recorder.rewards, "entropy": recorder.metrics["entropy"]}

    arms = run_arms(
        args.methods,
        args.seeds,
        args.entropy_grid,
        train,
        describe=lambda f: f"reward {f['mean_reward']:.3f}, entropy {f['normalized_entropy']:.3f}",
        diversity="normalized_entropy",
    )
    labels = arms.labels(LABELS)

    runs = [run.record() for run in arms.runs]
    summary = {
        method: {
            key: statistics.fmean(r[key] for r in runs if r["method"] == method)
            for key in ("mean_reward", "normalized_entropy")
        }
        for method in args.methods
    }
    width = max(len(m) for m in args.methods) + 2
    print(f"\n{args.samples} sampled answers per model; entropy = H(first-character vowels) / ln 5")
    print(f"{'method':<{width}}{'seed':>6}{'reward':>9}{'entropy':>9}  vowel counts (a e i o u)")
    for run in runs:
        counts = " ".join(f"{run['vowel_counts'][v]:>3}" for v in VOWELS)
        print(
            f"{run['method']:<{width}}{run['seed']:>6}{run['mean_reward']:>9.3f}{run['normalized_entropy']:>9.3f}"
            f"  {counts}"
        )
    print(f"\nmean over {args.seeds} seed(s)")
    print(f"{'method':<{width}}{'reward':>9}{'entropy':>9}  arm")
    for method, figures in summary.items():
        print(
            f"{method:<{width}}{figures['mean_reward']:>9.3f}{figures['normalized_entropy']:>9.3f}  {labels[method]}"
        )

    comparisons = compare_with_maxent(arms.runs, MARGINS)
    if comparisons:
        print()
        for line in comparison_lines(
            comparisons, labels, {"mean_reward": "reward", "normalized_entropy": "vowel entropy"}, MARGINS
        ):
            print(line)
    if "maxent" in args.methods:
        mine = [r for r in runs if r["method"] == "maxent"]
        kept = sum(r["mean_reward"] >= 0.95 and r["normalized_entropy"] >= 0.90 for r in mine)
        print(f"MaxEnt reward >= 0.95 and entropy >= 0.90 on {kept}/{args.seeds} seeds")

    curves = {
        method: {key: [r.curves[key] for r in arms.runs if r.method == method] for key in ("reward", "entropy")}
        for method in args.methods
    }
    result = {
        "settings": {
            "prompt": TASK.prompt,
            "steps": args.steps,
            "seeds": args.seeds,
            "samples": args.samples,
            **training_settings(TASK),
            "per_device_train_batch_size": TASK.num_generations,
            **maxent_run_settings(TASK, maxent),
            "maxent_overrides": maxent,
            "methods": list(args.methods),
            **arms.settings(args.methods, "normalized_entropy"),
            "comparison_margins": MARGINS,
        },
        "runs": runs,
        "grid_runs": [run.record() for run in arms.grid_runs],
        "summary": summary,
        "entropy_grid": {str(c): figures for c, figures in arms.entropy_grid.items()},
        "maxent_versus": comparisons,
        "curves_mean_over_seeds": {
            method: {
                key: [round(statistics.fmean(v), 4) for v in zip(*per_seed, strict=True)]
                for key, per_seed in c.items()
            }
            for method, c in curves.items()
        },
        "total_seconds": round(time.perf_counter() - started, 1),
    }
    (args.output_dir / "mode_coverage.json").write_text(json.dumps(result, indent=1) + "\n")
    plot_curves(curves, labels, args.output_dir / "mode_coverage.png")
    print(f"wrote {args.output_dir / 'mode_coverage.json'} and {args.output_dir / 'mode_coverage.png'}")
    return result


if __name__ == "__main__":
    torch.set_num_threads(1)  # the model is tiny: more threads only add contention on a small machine
    main()
