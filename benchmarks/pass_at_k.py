"""pass@k: what keeping several correct answers buys, MaxEnt listwise against GRPO and TRL's options against collapse.

Task: the prompt "10=" asks for two digits that sum to 10. Nine of the hundred two-digit answers are right (19, 28,
..., 91); the reward is 1.0 for an exact match (the completion, whitespace stripped, is one of them) and 0.0 otherwise.
Completions are at most 2 tokens. The tiny offline Qwen2 model of `maxent_grpo.tiny_model` (hidden size 64, one layer)
uses a character-level tokenizer over the digits and "=" only (14 tokens with pad, EOS and BOS), so a random model
samples a correct answer about once in 22 tries and every arm has something to learn from from the first step.
Per seed the same initialisation is trained by five arms (`maxent_grpo_experiments.trl_baselines`): stock TRL
`GRPOTrainer` (``grpo``); GRPO with a fixed token-entropy bonus, ``entropy_coef`` the best of the grid
(``grpo_entropy_fixed``, ``--entropy-grid``, default 0.01 0.02 0.05 0.1; see below); GRPO with TRL's adaptive bonus
(``grpo_entropy``: ``entropy_coef=0.01``, ``use_adaptive_entropy=True``, ``entropy_target=1.0``,
``entropy_coef_max=0.1``); GRPO with the loss on the top 20% tokens by entropy (``grpo_top_entropy``:
``top_entropy_quantile=0.2``); and `MaxEntGRPOTrainer` (``maxent``) with ``maxent_objective="listwise"``,
``maxent_mode_key="last_line"`` (the stripped answer), the config defaults for the rest (tau annealed from 0.25 to
0.003 over the whole run, ``maxent_q_temperature=1``, ``maxent_q_epsilon=0``) and
``maxent_mode_probability="policy"`` (an answer is the whole completion, so the policy's probability of it is exact),
unless ``--maxent FIELD=VALUE`` overrides a field (for example ``--maxent maxent_mode_probability=count``, or
``--maxent maxent_tau=0.5 --maxent maxent_tau_final=null`` for a fixed tau). All use one group of 16 completions per
step, learning rate 3e-3 with TRL's default linear decay, beta 0, sampling temperature 1.0, 300 steps.

After training, ``--samples`` (n, default 256) answers are sampled from each model; with c of them correct the script
reports pass@k = 1 - C(n - c, k) / C(n, k) (the unbiased estimator of Chen et al. 2021,
`maxent_grpo_experiments.pass_at_k`) for k = 1, 2, 4, ..., 64, the number of distinct correct answers among the n
samples (at most 9), their normalized entropy (the entropy of the empirical distribution of the correct answers / ln 9)
and the mean reward of the scored group at every training step. With one prompt and near-perfect accuracy pass@k is 1.0
for every arm that learns the task from k = 2 on; the difference shows in the distinct answers.

The run has two phases, in one process. Grid phase: per seed, stock GRPO and GRPO with each fixed ``entropy_coef`` of
the grid. The coefficient is chosen as a TRL user tuning it would (`maxent_grpo_experiments.trl_baselines
.choose_fixed_coefficient`): the highest mean normalized entropy of the correct answers (finer than the count of
distinct correct answers, which ties often) among the coefficients whose mean reward of the samples (pass@1) is at
most 0.01 below stock GRPO's, else the highest reward; ties to the smaller coefficient. It is chosen on the seeds it
is reported on, which favours that arm. Main phase: per seed, the adaptive, top-entropy and MaxEnt arms (seed 0 all,
seed 1 all, ...). Stock GRPO's grid runs and the chosen coefficient's are the ``grpo`` and ``grpo_entropy_fixed`` runs
(same seeds and settings: not trained again). The script prints a line per run, the grid's figures, the per-seed and
mean table, and one sentence per TRL arm: MaxEnt is *ahead* (or *behind*) on pass@1 or answer entropy when it is
above (below) that arm on every seed by more than a margin (0.01 pass@1, 0.05 entropy), *level* otherwise; with 3
seeds that describes the runs, it is no significance test.

Expected result (the committed run, means over 3 seeds): stock GRPO keeps one or two of the nine answers (1.33,
pass@1 0.999); TRL's fixed bonus at its best coefficient and the adaptive bonus keep two (pass@1 0.995 and 0.997),
``top_entropy_quantile`` two at a lower pass@1 (0.844); MaxEnt keeps three to five (4.00, answer entropy 0.62 against
at most 0.32 for a TRL arm) at pass@1 0.991. Takes about 3 minutes on 2 idle CPU cores with the defaults (24 runs of
300 steps, at 5-20 s each with start-up and sampling: 3 seeds x (stock GRPO + 4 grid coefficients) in the grid
phase, 3 x 3 arms in the main phase).

    python benchmarks/pass_at_k.py [--steps 300] [--seeds 3] [--samples 256] [--maxent FIELD=VALUE ...]
                                   [--entropy-grid C [C ...]] [--methods METHOD [METHOD ...]]
                                   [--output-dir DIR | --update-results]

It writes ``pass_at_k.json`` (settings with the grid, the chosen coefficient and its rule; every run of the table and
of the grid; per-method means; per-coefficient means; MaxEnt's per-seed differences to each TRL arm and their
verdicts; mean reward curves) and ``pass_at_k.png`` (reward over steps; pass@k against k; one line per arm) into the
output directory (``outputs/benchmarks/pass_at_k`` by default; ``--update-results`` replaces the committed
``benchmarks/results/pass_at_k``, which docs/benchmarks/pass-at-k.md shows), and prints the per-seed and mean table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch
from transformers.utils import logging as hf_logging

from maxent_grpo.bench.output import add_output_arguments
from maxent_grpo_experiments.answer_tasks import DIGITS
from maxent_grpo_experiments.pass_at_k import pass_at_k
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

# MaxEnt at the config defaults; an answer is the whole completion, so its probability under the policy is known
# exactly and the mode weights are importance-corrected (maxent_mode_probability="policy").
TASK = replace(DIGITS.task, maxent_settings={"maxent_mode_probability": "policy"})
LABELS = {**TRL_LABELS, "maxent": "MaxEnt listwise (last_line modes)"}
#: Margins of the plain-words comparison of MaxEnt with each TRL arm (`comparison_lines`), per figure key.
MARGINS = {"mean_reward": REWARD_TOLERANCE, "normalized_entropy": 0.05}
COMMITTED_OUTPUT_DIR = Path(__file__).resolve().parent / "results" / "pass_at_k"
KS = (1, 2, 4, 8, 16, 32, 64)


def digit_pair_reward(completions: list, **kwargs: Any) -> list[float]:
    """1.0 when the completion, whitespace stripped, is two digits that sum to 10; else 0.0."""
    return DIGITS.reward(completions)


def evaluate(answers: Sequence[str]) -> dict[str, Any]:
    """pass@k for every k of `KS`, mean reward, distinct correct answers and their normalized entropy.

    The normalized entropy is that of the empirical distribution of the correct answers, divided by ln 9 (1.0: all
    nine equally often; 0.0: one answer).
    """
    figures = DIGITS.evaluate(answers)
    n, c = len(answers), sum(figures["answer_counts"].values())
    return {
        "n": n,
        "correct": c,
        "mean_reward": figures["mean_reward"],
        "pass_at_k": {str(k): pass_at_k(n, c, k) for k in KS if k <= n},
        "distinct_correct": figures["distinct_correct"],
        "normalized_entropy": figures["normalized_entropy"],
    }


def plot(curves: dict[str, list[list[float]]], runs: list[dict[str, Any]], labels: dict[str, str], path: Path) -> None:
    """Left: mean reward per step (mean over seeds, min-max band, smoothed). Right: pass@k against k per arm."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(13, 4.6))
    ks = [int(k) for k in runs[0]["pass_at_k"]]
    for method, method_curves in curves.items():
        smoothed = [smooth(run, SMOOTHING_WINDOW) for run in method_curves]
        by_step = list(zip(*smoothed, strict=True))
        steps = range(1, len(by_step) + 1)
        left.plot(steps, [statistics.fmean(v) for v in by_step], label=labels[method])
        left.fill_between(steps, [min(v) for v in by_step], [max(v) for v in by_step], alpha=0.15)
        mean = [statistics.fmean(r["pass_at_k"][str(k)] for r in runs if r["method"] == method) for k in ks]
        distinct = statistics.fmean(r["distinct_correct"] for r in runs if r["method"] == method)
        right.plot(ks, mean, marker="o", label=f"{labels[method]}: {distinct:.1f} distinct correct")
    left.set(title="mean reward of the step's group", xlabel="step", ylim=(-0.02, 1.02))
    right.set(title="pass@k after training (mean over seeds)", xlabel="k", xscale="log", ylim=(-0.02, 1.02))
    right.set_xticks(ks, [str(k) for k in ks])
    for axis in (left, right):
        axis.grid(alpha=0.3)
        axis.legend(loc="lower right", fontsize="small")
    figure.suptitle(f"two digits that sum to 10 (9 correct answers), {TASK.num_generations} completions per step")
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(parser, maxent_help="MaxEntGRPOConfig override, repeatable")
    parser.add_argument("--samples", type=int, default=256, help="answers sampled per trained model (n >= 128)")
    add_arm_arguments(parser)
    add_output_arguments(parser, "pass_at_k", COMMITTED_OUTPUT_DIR)
    args = parser.parse_args(argv)
    check_arguments(parser, args)
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the experiment, print the table, write the JSON and the PNG; return the JSON's content."""
    args = parse_args(argv)
    maxent = dict(args.maxent)
    hf_logging.set_verbosity_error()
    args.output_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    def train(method: str, seed: int, trl_fields: Mapping[str, Any]) -> RunOutput:
        recorder = StepRecorder(digit_pair_reward)
        answers = train_and_sample(TASK, method, seed, args.steps, maxent, recorder, trl_fields, args.samples)
        return evaluate(answers), {"reward": recorder.rewards}

    arms = run_arms(
        args.methods,
        args.seeds,
        args.entropy_grid,
        train,
        describe=lambda f: (
            f"pass@1 {f['pass_at_k']['1']:.3f}, distinct correct {f['distinct_correct']}, "
            f"entropy {f['normalized_entropy']:.3f}"
        ),
        diversity="normalized_entropy",
    )
    labels = arms.labels(LABELS)
    runs = [run.record() for run in arms.runs]
    curves = {method: [r.curves["reward"] for r in arms.runs if r.method == method] for method in args.methods}

    ks = list(runs[0]["pass_at_k"])
    header = "".join(f"{'pass@' + k:>10}" for k in ks)
    width = max(len(m) for m in args.methods) + 2
    print(
        f"\nn = {args.samples} samples per model; distinct = distinct correct answers among them (of 9), "
        "entropy = H(correct answers) / ln 9"
    )
    print(f"{'method':<{width}}{'seed':>6}{header}{'distinct':>10}{'entropy':>9}")
    summary: dict[str, dict[str, Any]] = {}
    for method in args.methods:
        mine = [r for r in runs if r["method"] == method]
        for run in mine:
            cells = "".join(f"{run['pass_at_k'][k]:>10.3f}" for k in ks)
            print(
                f"{method:<{width}}{run['seed']:>6}{cells}{run['distinct_correct']:>10}"
                f"{run['normalized_entropy']:>9.3f}"
            )
        summary[method] = {
            "pass_at_k": {k: statistics.fmean(r["pass_at_k"][k] for r in mine) for k in ks},
            "distinct_correct": statistics.fmean(r["distinct_correct"] for r in mine),
            "normalized_entropy": statistics.fmean(r["normalized_entropy"] for r in mine),
            "final_step_reward": statistics.fmean(statistics.fmean(c[-SMOOTHING_WINDOW:]) for c in curves[method]),
        }
    print(f"\nmean over {args.seeds} seed(s)")
    print(f"{'method':<{width}}{header}{'distinct':>10}{'entropy':>9}  arm")
    for method, figures in summary.items():
        cells = "".join(f"{figures['pass_at_k'][k]:>10.3f}" for k in ks)
        print(
            f"{method:<{width}}{cells}{figures['distinct_correct']:>10.2f}{figures['normalized_entropy']:>9.3f}  "
            f"{labels[method]}"
        )

    comparisons = compare_with_maxent(arms.runs, MARGINS)
    if comparisons:
        print()
        names = {"mean_reward": "pass@1", "normalized_entropy": "answer entropy"}
        for line in comparison_lines(comparisons, labels, names, MARGINS):
            print(line)
        ours = summary["maxent"]
        for other in comparisons:
            theirs = summary[other]
            print(
                f"MaxEnt / {other}: distinct correct answers {ours['distinct_correct']:.2f} / "
                f"{theirs['distinct_correct']:.2f}, pass@1 difference "
                f"{ours['pass_at_k']['1'] - theirs['pass_at_k']['1']:+.3f} (means over seeds)"
            )

    grid = {
        str(c): {
            **figures,
            "distinct_correct": statistics.fmean(
                r.figures["distinct_correct"] for r in arms.grid_runs if r.entropy_coef == c
            ),
        }
        for c, figures in arms.entropy_grid.items()
    }
    result = {
        "settings": {
            "prompt": TASK.prompt,
            "alphabet": TASK.alphabet,
            "steps": args.steps,
            "seeds": args.seeds,
            "samples": args.samples,
            **training_settings(TASK),
            **maxent_run_settings(TASK, maxent),
            "maxent_overrides": maxent,
            "methods": list(args.methods),
            **arms.settings(args.methods, "normalized_entropy"),
            "comparison_margins": MARGINS,
        },
        "runs": runs,
        "grid_runs": [run.record() for run in arms.grid_runs],
        "summary": summary,
        "entropy_grid": grid,
        "maxent_versus": comparisons,
        "reward_curves_mean_over_seeds": {
            method: [round(statistics.fmean(v), 4) for v in zip(*per_seed, strict=True)]
            for method, per_seed in curves.items()
        },
        "total_seconds": round(time.perf_counter() - started, 1),
    }
    (args.output_dir / "pass_at_k.json").write_text(json.dumps(result, indent=1) + "\n")
    plot(curves, runs, labels, args.output_dir / "pass_at_k.png")
    print(f"wrote {args.output_dir / 'pass_at_k.json'} and {args.output_dir / 'pass_at_k.png'}")
    return result


if __name__ == "__main__":
    torch.set_num_threads(1)  # the model is tiny: more threads only add contention on a small machine
    main()
