"""pass@k: what keeping several correct answers buys, GRPO against MaxEnt listwise.

Task: the prompt "10=" asks for two digits that sum to 10. Nine of the hundred two-digit answers are right (19, 28,
..., 91); the reward is 1.0 for an exact match (the completion, whitespace stripped, is one of them) and 0.0 otherwise.
Completions are at most 2 tokens. The tiny offline Qwen2 model of `maxent_grpo.tiny_model` (hidden size 64, one layer)
uses a character-level tokenizer over the digits and "=" only (14 tokens with pad, EOS and BOS), so a random model
samples a correct answer about once in 22 tries and both methods have something to learn from from the first step.
Per seed the same initialisation is trained by stock TRL `GRPOTrainer` and by `MaxEntGRPOTrainer` with
``maxent_objective="listwise"``, ``maxent_mode_key="last_line"`` (the stripped answer), the config defaults for the
rest (tau annealed from 0.25 to 0.003 over the whole run, ``maxent_q_temperature=1``, ``maxent_q_epsilon=0``) and
``maxent_mode_probability="policy"``
(an answer is the whole completion, so the policy's probability of it is exact), unless ``--maxent FIELD=VALUE``
overrides a field (for example ``--maxent maxent_mode_probability=count``, or ``--maxent maxent_tau=0.5 --maxent
maxent_tau_final=null`` for a fixed tau). Both use one group of 16 completions per step, learning rate 3e-3 with
TRL's default linear decay, beta 0, sampling temperature 1.0. Runs are interleaved (seed 0 GRPO, seed 0 MaxEnt, seed 1
GRPO, ...) in one process so machine drift hits both.

After training, ``--samples`` (n, default 256) answers are sampled from each model; with c of them correct the script
reports pass@k = 1 - C(n - c, k) / C(n, k) (the unbiased estimator of Chen et al. 2021, `maxent_grpo.bench.pass_at_k`)
for k = 1, 2, 4, ..., 64, the number of distinct correct answers among the n samples (at most 9), their normalized
entropy (H / ln 9) and the mean reward of the scored group at every training step. With one prompt and near-perfect
accuracy pass@k is 1.0 for both methods from k = 2 on; the difference shows in the distinct answers. Takes about 1
minute on
2 idle CPU cores (six runs of 300 steps at 0.01-0.03 s per step, plus start-up).

    python benchmarks/pass_at_k.py [--steps 300] [--seeds 3] [--samples 256] [--maxent FIELD=VALUE ...]
                                   [--output-dir DIR | --update-results]

It writes ``pass_at_k.json`` (settings, per-run figures, mean reward curves) and ``pass_at_k.png`` (reward over steps;
pass@k against k) into the output directory (``outputs/benchmarks/pass_at_k`` by default; ``--update-results``
replaces the committed ``benchmarks/results/pass_at_k``, which docs/benchmarks/pass-at-k.md shows), and prints the
per-seed and mean table.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch
from transformers.utils import logging as hf_logging

from maxent_grpo.bench.output import add_output_arguments
from maxent_grpo.bench.pass_at_k import pass_at_k
from maxent_grpo.bench.single_prompt import (
    METHODS,
    SMOOTHING_WINDOW,
    SinglePromptTask,
    StepRecorder,
    add_run_arguments,
    smooth,
)
from maxent_grpo.rewards import completion_text

# MaxEnt at the config defaults; an answer is the whole completion, so its probability under the policy is known
# exactly and the mode weights are importance-corrected (maxent_mode_probability="policy").
TASK = SinglePromptTask(
    prompt="10=",
    mode_key="last_line",
    alphabet="0123456789=",
    maxent_settings={"maxent_mode_probability": "policy"},
)
CORRECT = frozenset(f"{a}{10 - a}" for a in range(1, 10))
LABELS = {"grpo": "GRPO (stock TRL)", "maxent": "MaxEnt listwise (last_line modes)"}
COMMITTED_OUTPUT_DIR = Path(__file__).resolve().parent / "results" / "pass_at_k"
KS = (1, 2, 4, 8, 16, 32, 64)


def digit_pair_reward(completions: list, **kwargs: Any) -> list[float]:
    """1.0 when the completion, whitespace stripped, is two digits that sum to 10; else 0.0."""
    return [float(completion_text(c).strip() in CORRECT) for c in completions]


def evaluate(answers: Sequence[str]) -> dict[str, Any]:
    """pass@k for every k of `KS`, mean reward, distinct correct answers and their normalized entropy.

    The normalized entropy is that of the empirical distribution of the correct answers, divided by ln 9 (1.0: all
    nine equally often; 0.0: one answer).
    """
    rewards = digit_pair_reward(list(answers))
    n, c = len(rewards), int(sum(rewards))
    counts = Counter(a.strip() for a, r in zip(answers, rewards, strict=True) if r)
    entropy = sum(m / c * math.log(c / m) for m in counts.values())
    return {
        "n": n,
        "correct": c,
        "mean_reward": c / n,
        "pass_at_k": {str(k): pass_at_k(n, c, k) for k in KS if k <= n},
        "distinct_correct": len(counts),
        "normalized_entropy": entropy / math.log(len(CORRECT)),
    }


def plot(curves: dict[str, list[list[float]]], runs: list[dict[str, Any]], path: Path) -> None:
    """Left: mean reward per step (mean over seeds, min-max band, smoothed). Right: pass@k against k per method."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2))
    for method in METHODS:
        smoothed = [smooth(run, SMOOTHING_WINDOW) for run in curves[method]]
        by_step = list(zip(*smoothed, strict=True))
        steps = range(1, len(by_step) + 1)
        left.plot(steps, [statistics.fmean(v) for v in by_step], label=LABELS[method])
        left.fill_between(steps, [min(v) for v in by_step], [max(v) for v in by_step], alpha=0.25)
        ks = [int(k) for k in runs[0]["pass_at_k"]]
        mean = [statistics.fmean(r["pass_at_k"][str(k)] for r in runs if r["method"] == method) for k in ks]
        distinct = statistics.fmean(r["distinct_correct"] for r in runs if r["method"] == method)
        right.plot(ks, mean, marker="o", label=f"{LABELS[method]}: {distinct:.1f} distinct correct answers")
    left.set(title="mean reward of the step's group", xlabel="step", ylim=(-0.02, 1.02))
    right.set(title="pass@k after training (mean over seeds)", xlabel="k", xscale="log", ylim=(-0.02, 1.02))
    right.set_xticks(ks, [str(k) for k in ks])
    for axis in (left, right):
        axis.grid(alpha=0.3)
        axis.legend(loc="lower right")
    figure.suptitle(f"two digits that sum to 10 (9 correct answers), {TASK.num_generations} completions per step")
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(parser, maxent_help="MaxEntGRPOConfig override, repeatable")
    parser.add_argument("--samples", type=int, default=256, help="answers sampled per trained model (n >= 128)")
    add_output_arguments(parser, "pass_at_k", COMMITTED_OUTPUT_DIR)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the experiment, print the table, write the JSON and the PNG; return the JSON's content."""
    args = parse_args(argv)
    maxent = dict(args.maxent)
    hf_logging.set_verbosity_error()
    args.output_dir.mkdir(parents=True, exist_ok=True)

    runs: list[dict[str, Any]] = []
    curves: dict[str, list[list[float]]] = {m: [] for m in METHODS}
    started = time.perf_counter()
    for seed in range(args.seeds):
        for method in METHODS:
            recorder = StepRecorder(digit_pair_reward)
            run_start = time.perf_counter()
            trainer = TASK.train(method, seed, args.steps, maxent, recorder)
            final = evaluate(TASK.sample_answers(trainer.model, trainer.processing_class, args.samples, 1000 + seed))
            seconds = time.perf_counter() - run_start
            runs.append({"method": method, "seed": seed, "seconds": round(seconds, 1), **final})
            curves[method].append(recorder.rewards)
            print(
                f"[{len(runs)}/{args.seeds * len(METHODS)}] seed {seed} {method:<6} {seconds:6.1f}s: "
                f"pass@1 {final['pass_at_k']['1']:.3f}, distinct correct {final['distinct_correct']}",
                flush=True,
            )

    ks = list(runs[0]["pass_at_k"])
    header = "".join(f"{'pass@' + k:>10}" for k in ks)
    print(
        f"\nn = {args.samples} samples per model; distinct = distinct correct answers among them (of 9), "
        "entropy = H(correct answers) / ln 9"
    )
    print(f"{'method':<8}{'seed':>6}{header}{'distinct':>10}{'entropy':>9}")
    summary: dict[str, dict[str, Any]] = {}
    for method in METHODS:
        mine = [r for r in runs if r["method"] == method]
        for run in mine:
            cells = "".join(f"{run['pass_at_k'][k]:>10.3f}" for k in ks)
            print(f"{method:<8}{run['seed']:>6}{cells}{run['distinct_correct']:>10}{run['normalized_entropy']:>9.3f}")
        summary[method] = {
            "pass_at_k": {k: statistics.fmean(r["pass_at_k"][k] for r in mine) for k in ks},
            "distinct_correct": statistics.fmean(r["distinct_correct"] for r in mine),
            "normalized_entropy": statistics.fmean(r["normalized_entropy"] for r in mine),
            "final_step_reward": statistics.fmean(statistics.fmean(c[-SMOOTHING_WINDOW:]) for c in curves[method]),
        }
    for method in METHODS:
        cells = "".join(f"{summary[method]['pass_at_k'][k]:>10.3f}" for k in ks)
        figures = summary[method]
        print(
            f"{method:<8}{'mean':>6}{cells}{figures['distinct_correct']:>10.2f}{figures['normalized_entropy']:>9.3f}"
        )
    grpo, ours = summary["grpo"], summary["maxent"]
    print(
        f"MaxEnt pass@1 - GRPO pass@1 = {ours['pass_at_k']['1'] - grpo['pass_at_k']['1']:+.3f}; distinct correct "
        f"answers MaxEnt / GRPO = {ours['distinct_correct'] / max(grpo['distinct_correct'], 1e-9):.2f}x"
    )

    result = {
        "settings": {
            "prompt": TASK.prompt,
            "alphabet": TASK.alphabet,
            "steps": args.steps,
            "seeds": args.seeds,
            "samples": args.samples,
            **TASK.training_settings(),
            **TASK.maxent_run_settings(maxent),
            "maxent_overrides": maxent,
        },
        "runs": runs,
        "summary": summary,
        "reward_curves_mean_over_seeds": {
            method: [round(statistics.fmean(v), 4) for v in zip(*curves[method], strict=True)] for method in METHODS
        },
        "total_seconds": round(time.perf_counter() - started, 1),
    }
    (args.output_dir / "pass_at_k.json").write_text(json.dumps(result, indent=1) + "\n")
    plot(curves, runs, args.output_dir / "pass_at_k.png")
    print(f"wrote {args.output_dir / 'pass_at_k.json'} and {args.output_dir / 'pass_at_k.png'}")
    return result


if __name__ == "__main__":
    torch.set_num_threads(1)  # the model is tiny: more threads only add contention on a small machine
    main()
