"""The benchmark of TRL pull request #4152 ("use prompt_ids from generation"), written against `MaxEntGRPOTrainer`.

The pull request ran GRPO on Qwen3-0.6B-Base over the first 500 TL;DR prompts with a dummy reward (the number of
distinct characters of a completion), generating with vLLM colocated on the training GPU, and compared the logged
curves before and after the change. This script is that run with our trainer, which takes the prompt ids from the
generation backend as well. The objective stays TRL's (``--objective grpo``) unless you ask for the listwise one.

    python examples/trl_pr_benchmark.py            # the real run: needs a GPU, vLLM and the Hugging Face Hub
    python examples/trl_pr_benchmark.py --tiny     # offline on CPU in seconds: the tiny model, bundled prompts,
                                                   # transformers generation, a few steps

The pull request's reviewer asked whether the difference between the curves is within the variance of a repeated
run. ``--ab N`` answers it: stock ``GRPOTrainer`` ("before") against this trainer ("after", or "listwise" with
``--objective listwise``) on the same recipe (``tldr``, or ``tiny`` with ``--tiny``) for seeds 1..N, paired by seed,
with a verdict per metric (identical on every seed / equivalent within the margin / differs / inconclusive). It is
``maxent-grpo bench`` (see docs/benchmarks/ab.md), which takes the options this script does not know
(``--margin reward=0.01``, ``--set FIELD=VALUE``, ...):

    python examples/trl_pr_benchmark.py --ab 3 --tiny --margin "step time (s)=2%"
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from datasets import Dataset, load_dataset

from maxent_grpo import MaxEntGRPOConfig, MaxEntGRPOTrainer
from maxent_grpo.cli import main as maxent_grpo_command
from maxent_grpo.rewards import unique_chars_reward
from maxent_grpo.tiny_model import build_tiny_model, build_tiny_tokenizer

# Stand-ins for TL;DR prompts, for the offline run.
BUNDLED_PROMPTS = [
    "SUBREDDIT: r/cooking\nPOST: My bread never rises, even with fresh yeast and a warm kitchen.\nTL;DR:",
    "SUBREDDIT: r/running\nPOST: I want to run a half marathon in spring but my knees hurt after 10 km.\nTL;DR:",
    "SUBREDDIT: r/personalfinance\nPOST: Should I pay off my car loan early or put the money in savings?\nTL;DR:",
    "SUBREDDIT: r/gardening\nPOST: The tomato leaves turn yellow from the bottom up every summer.\nTL;DR:",
    "SUBREDDIT: r/relationships\nPOST: My roommate never does the dishes and gets upset when I ask.\nTL;DR:",
    "SUBREDDIT: r/learnprogramming\nPOST: I keep starting tutorials and never finish a project of my own.\nTL;DR:",
    "SUBREDDIT: r/travel\nPOST: Two weeks in Japan in April: is a rail pass worth it for a first trip?\nTL;DR:",
    "SUBREDDIT: r/cats\nPOST: My cat wakes me up at 5 am every day asking for food.\nTL;DR:",
]


def real_run(output_dir: str, objective: str, max_steps: int) -> MaxEntGRPOTrainer:
    dataset = load_dataset("trl-lib/tldr", split="train[:500]").select_columns(["prompt"])
    training_args = MaxEntGRPOConfig(
        output_dir=output_dir,
        per_device_train_batch_size=4,  # reduce the batch size to reduce memory usage
        gradient_accumulation_steps=8,
        num_generations=4,  # reduce the number of generations to reduce memory usage
        max_completion_length=256,  # reduce the completion length to reduce memory usage
        steps_per_generation=4,
        logging_steps=1,
        num_train_epochs=1,
        max_steps=max_steps,
        vllm_mode="colocate",
        use_vllm=True,
        report_to="trackio",
        project="maxent-grpo-pr-4152",
        maxent_objective=objective,
    )
    return MaxEntGRPOTrainer(
        model="Qwen/Qwen3-0.6B-Base",
        reward_funcs=[unique_chars_reward],
        args=training_args,
        train_dataset=dataset,
    )


def tiny_run(output_dir: str, objective: str, max_steps: int) -> MaxEntGRPOTrainer:
    tokenizer = build_tiny_tokenizer()
    training_args = MaxEntGRPOConfig(
        output_dir=output_dir,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        num_generations=4,
        max_completion_length=16,
        steps_per_generation=2,
        logging_steps=1,
        max_steps=max_steps,
        learning_rate=1e-3,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        maxent_objective=objective,
    )
    return MaxEntGRPOTrainer(
        model=build_tiny_model(tokenizer),
        reward_funcs=[unique_chars_reward],
        args=training_args,
        train_dataset=Dataset.from_dict({"prompt": BUNDLED_PROMPTS}),
        processing_class=tokenizer,
    )


def ab_comparison(options: argparse.Namespace, bench_options: list[str]) -> int:
    """``maxent-grpo bench``: "before" against this trainer over ``options.ab`` seeds; prints the verdicts."""
    argv = [
        "bench",
        f"--arms=before,{'after' if options.objective == 'grpo' else 'listwise'}",
        f"--recipe={'tiny' if options.tiny else 'tldr'}",
        f"--seeds={options.ab}",
        f"--output-dir={Path(options.output_dir) / 'ab'}",
    ]
    if options.max_steps is not None:
        argv.append(f"--max-steps={options.max_steps}")
    return maxent_grpo_command([*argv, *bench_options])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="offline on CPU: tiny model, bundled prompts, no vLLM")
    parser.add_argument("--objective", choices=["grpo", "listwise"], default="grpo")
    parser.add_argument("--max-steps", type=int, help="stop after this many steps (default: one epoch; --tiny: 4)")
    parser.add_argument("--output-dir", default="tmp")
    parser.add_argument(
        "--ab",
        type=int,
        metavar="SEEDS",
        help="compare stock GRPOTrainer with this trainer over SEEDS seeds (maxent-grpo bench), print the verdicts",
    )
    options, bench_options = parser.parse_known_args()
    if options.ab is not None:
        return ab_comparison(options, bench_options)
    if bench_options:
        parser.error(f"unrecognized arguments: {' '.join(bench_options)} (only --ab passes options on)")

    if options.tiny:
        trainer = tiny_run(options.output_dir, options.objective, options.max_steps or 4)
    else:
        trainer = real_run(options.output_dir, options.objective, options.max_steps or -1)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    rewards = [entry["reward"] for entry in trainer.state.log_history if "reward" in entry]
    print(
        f"{trainer.state.global_step} steps in {seconds:.1f} s ({seconds / max(trainer.state.global_step, 1):.2f} s "
        f"per step); mean reward first step {rewards[0]:.2f}, last step {rewards[-1]:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
