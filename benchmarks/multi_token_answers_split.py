"""Where multi_token_answers.py's held-out pass@k comes from: held-out prompts whose sum training derivations end in,
against those whose sum none does.

The multi-token task's held-out prompts (`maxent_grpo_experiments.digit_derivations.heldout_prompts`) are of two kinds:
34 whose sum s also ends training derivations (``a+b+c=ss``), so the derivation's last two tokens were trained on, and
the 4 prompts of the sums 0 and 1, whose derivation ends in ``=00`` or ``=01``, which no training derivation does. Any
two digits that sum to s answer a prompt, so once its derivation is exact a prompt is solved by whichever answer the
model picks: pass@k counts prompts whose derivation the model gets right, and the answers it keeps show in the
distinct correct answers instead. This script reads a run's JSON (the committed run by default) and prints, per kind
and k, each method's held-out pass@k (the unbiased estimator, `maxent_grpo_experiments.pass_at_k`, from each run's
correct samples per prompt) and MaxEnt's difference to each other method, paired by seed, with its 95% t interval:

    python benchmarks/multi_token_answers_split.py [--results benchmarks/results/multi_token_answers] [--k 1 16 256]

It trains nothing and takes a second.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from maxent_grpo_experiments.digit_derivations import prompt_sum, training_prompts
from maxent_grpo_experiments.over_seeds import format_difference, interval, paired_difference, verdict
from maxent_grpo_experiments.pass_at_k import mean_pass_at_k

COMMITTED = Path(__file__).resolve().parent / "results" / "multi_token_answers"


#: The two kinds of held-out prompt, and how the report names them.
KINDS = {"seen": "whose sum training derivations end in", "unseen": "whose sum no training derivation ends in"}


def split_heldout(prompts: Sequence[str]) -> dict[str, list[str]]:
    """``prompts`` by whether a training derivation ends in the same sum (``seen``) or none does (``unseen``)."""
    trained_sums = {prompt_sum(p) for p in training_prompts()}
    return {
        "seen": [p for p in prompts if prompt_sum(p) in trained_sums],
        "unseen": [p for p in prompts if prompt_sum(p) not in trained_sums],
    }


def pass_at_k_on(runs: Sequence[Mapping[str, Any]], prompts: Sequence[str], samples: int, k: int) -> dict[str, Any]:
    """Per method (in run order), per seed, its mean pass@k over ``prompts``."""
    table: dict[str, dict[int, float]] = {}
    for run in runs:
        counts = [(samples, run["correct_per_prompt"][p]) for p in prompts]
        table.setdefault(run["method"], {})[run["seed"]] = mean_pass_at_k(counts, k)
    return table


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=COMMITTED, help="folder of a multi_token_answers.json")
    parser.add_argument("--k", type=int, nargs="+", default=[1, 16, 256], help="the k of pass@k")
    options = parser.parse_args(argv)
    figures = json.loads((options.results / "multi_token_answers.json").read_text())
    samples = figures["settings"]["samples"]
    runs = [run for run in figures["runs"] if "=" not in run["method"]]  # the grid's runs: in the fixed arm already
    report: dict[str, Any] = {}
    for kind, prompts in split_heldout(figures["settings"]["heldout_prompts"]).items():
        listed = f": {' '.join(prompts)}" if len(prompts) < 8 else ""
        print(f"\n{len(prompts)} held-out prompts {KINDS[kind]}{listed}")
        report[kind] = {"prompts": prompts}
        for k in options.k:
            table = pass_at_k_on(runs, prompts, samples, k)
            means = {method: sum(per_seed.values()) / len(per_seed) for method, per_seed in table.items()}
            print(f"  pass@{k}: " + ", ".join(f"{method} {value:.3f}" for method, value in means.items()))
            differences = {
                other: paired_difference([table["maxent"][seed] - per_seed[seed] for seed in table["maxent"]])
                for other, per_seed in table.items()
                if other != "maxent"
            }
            for other, difference in differences.items():
                print(f"    maxent - {other}: {format_difference(difference)} ({verdict(difference)})")
            report[kind][str(k)] = {
                "mean": means,
                "ci95": {method: interval(list(per_seed.values())) for method, per_seed in table.items()},
                "maxent_minus": differences,
            }
    return report


if __name__ == "__main__":
    main()
