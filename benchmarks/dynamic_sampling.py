"""Dynamic sampling on a rare-success task: reward after the same number of optimizer steps, and wall time.

Task: 64 prompts, as in real data sets a mix of prompts the model can learn and prompts it cannot: for the 16
"solvable <i>:" prompts the reward is 1 when the completion starts with a rare character ("x", "y" or "z"), for the 48
"unsolvable <i>:" prompts it is always 0. The tiny random model samples a rare character with probability about 3/100,
so with 8 samples per prompt about 95% of the groups start with all rewards equal (zero advantage: nothing to learn),
and the 75% unsolvable ones stay that way. Both arms train MaxEntGRPOTrainer (GRPO objective) on the same model,
data and seeds for the same number of optimizer steps; one refills the groups without signal (`dynamic_sampling=True`),
the other does not. Runs alternate (off, on, off, on, ...) in one process. The script prints, per seed and on
average, the mean reward of 256 samples on the solvable prompts after training, the share of trained groups that had
signal, and the wall time, with the on/off ratios.

    python benchmarks/dynamic_sampling.py [--steps 40] [--seeds 3] [--max-rounds 4]
                                          [--output-dir DIR | --update-results]

Takes a few minutes on 2 CPU cores. Writes a JSON of the figures to --output-dir (default
outputs/benchmarks/dynamic_sampling); --update-results replaces the committed benchmarks/results/dynamic_sampling.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from transformers import PrinterCallback, ProgressCallback
from transformers.utils import logging as hf_logging

from maxent_grpo import MaxEntGRPOConfig, MaxEntGRPOTrainer
from maxent_grpo.bench.output import add_output_arguments
from maxent_grpo.rewards import completion_text
from maxent_grpo.tiny_model import build_tiny_model, build_tiny_tokenizer

RARE = "xyz"
SOLVABLE = [f"solvable {i}:" for i in range(16)]
PROMPTS = SOLVABLE + [f"unsolvable {i}:" for i in range(48)]


def rare_start(prompts: list[str], completions: list, **kwargs: Any) -> list[float]:
    """1.0 when a solvable prompt's completion starts with a rare character ("x", "y" or "z"); else 0.0."""
    return [
        float(p.startswith("solvable") and completion_text(c)[:1] in RARE)
        for p, c in zip(prompts, completions, strict=True)
    ]


@torch.no_grad()
def evaluate(model: torch.nn.Module, tokenizer: Any, samples: int, seed: int) -> float:
    """Mean reward of ``samples`` sampled completions, spread evenly over the solvable prompts."""
    torch.manual_seed(seed)
    model.eval()
    hits = 0
    per_prompt = max(samples // len(SOLVABLE), 1)
    for prompt in SOLVABLE:
        prompt_ids = torch.tensor([tokenizer(prompt)["input_ids"]] * per_prompt, device=model.device)
        out = model.generate(
            input_ids=prompt_ids,
            attention_mask=torch.ones_like(prompt_ids),
            do_sample=True,
            max_new_tokens=1,
            pad_token_id=tokenizer.pad_token_id,
        )
        hits += sum(tokenizer.decode(row[-1:]) in RARE for row in out.tolist())
    return hits / (per_prompt * len(SOLVABLE))


def train(dynamic: bool, seed: int, steps: int, max_rounds: int) -> dict[str, float]:
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, seed=seed)
    dataset = Dataset.from_dict({"prompt": PROMPTS * 4})
    with tempfile.TemporaryDirectory() as output_dir:
        args = MaxEntGRPOConfig(
            output_dir=output_dir,
            per_device_train_batch_size=32,
            num_generations=8,
            max_completion_length=2,
            max_steps=steps,
            learning_rate=5e-3,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            use_cpu=True,
            seed=seed,
            disable_tqdm=True,
            dynamic_sampling=dynamic,
            dynamic_sampling_max_rounds=max_rounds,
        )
        trainer = MaxEntGRPOTrainer(
            model=model, reward_funcs=rare_start, args=args, train_dataset=dataset, processing_class=tokenizer
        )
        trainer.remove_callback(PrinterCallback)
        trainer.remove_callback(ProgressCallback)
        start = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - start
    zero_std = [e["frac_reward_zero_std"] for e in trainer.state.log_history if "frac_reward_zero_std" in e]
    return {
        "reward_after": evaluate(trainer.model, tokenizer, samples=256, seed=seed),
        "groups_with_signal": 1.0 - sum(zero_std) / len(zero_std),
        "wall_seconds": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--max-rounds", type=int, default=4)
    add_output_arguments(parser, "dynamic_sampling", Path(__file__).resolve().parent / "results" / "dynamic_sampling")
    options = parser.parse_args()
    hf_logging.set_verbosity_error()

    train(False, 0, 2, options.max_rounds)  # warm-up (imports, allocator) so the first timed run is not penalised
    results: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    for seed in range(options.seeds):
        for arm in ("off", "on"):
            figures = train(arm == "on", seed, options.steps, options.max_rounds)
            results[arm].append(figures)
            print(
                f"seed {seed} dynamic sampling {arm:>3}: reward after {figures['reward_after']:.3f}, "
                f"groups with signal {figures['groups_with_signal']:.2f}, wall {figures['wall_seconds']:.1f} s",
                flush=True,
            )

    def mean(arm: str, key: str) -> float:
        return sum(r[key] for r in results[arm]) / len(results[arm])

    print(f"\n{'':<28}{'off':>10}{'on':>10}{'on/off':>10}")
    for key, label in (
        ("reward_after", "reward after training"),
        ("groups_with_signal", "trained groups with signal"),
        ("wall_seconds", "wall time (s)"),
    ):
        off, on = mean("off", key), mean("on", key)
        ratio = on / off if off else float("inf")
        print(f"{label:<28}{off:>10.3f}{on:>10.3f}{ratio:>10.2f}")
    options.output_dir.mkdir(parents=True, exist_ok=True)
    summary = {"settings": vars(options) | {"output_dir": str(options.output_dir)}, "runs": results}
    (options.output_dir / "dynamic_sampling.json").write_text(json.dumps(summary, indent=2))
    print(f"\nwrote {options.output_dir / 'dynamic_sampling.json'}")


if __name__ == "__main__":
    main()
