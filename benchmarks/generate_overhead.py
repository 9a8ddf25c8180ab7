"""Per-step cost of MaxEntGRPOTrainer's generation pipeline against stock GRPOTrainer, side by side.

Both trainers run the same model, data and seed with the fault-free TransformersBackend; runs alternate
(stock, ours, stock, ours, ...) in one process so machine drift hits both. Prints the median seconds per optimizer
step of each, their ratio, and the time spent in the backend + helpers pipeline outside the model's `generate`.
``--model tiny`` (the default) is the in-process tiny model; ``--model smollm2`` the real SmolLM2-135M-Instruct
(`maxent_grpo.smollm2`, float32), on chat prompts.

    python benchmarks/generate_overhead.py [--model tiny|smollm2] [--rounds 5] [--steps 8]

Expect a ratio close to 1.00 (the pipeline adds bookkeeping on lists of a few dozen rows per step).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from typing import Any

from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging
from trl import GRPOConfig, GRPOTrainer

from maxent_grpo import MaxEntGRPOConfig, MaxEntGRPOTrainer
from maxent_grpo.rewards import completion_text
from maxent_grpo.smollm2 import SMOLLM2, smollm2_dir
from maxent_grpo.tiny_model import build_tiny_model, build_tiny_tokenizer
from maxent_grpo.training.generation import step as generation_step


def reward_num_unique_chars(completions: list[Any], **kwargs: Any) -> list[float]:
    return [float(len(set(completion_text(c)))) for c in completions]


class PipelineTimer:
    """Accumulates time in `collect_completion_groups` and in the backend's `generate` calls."""

    def __init__(self) -> None:
        self.collect_seconds = 0.0
        self.backend_seconds = 0.0
        collect_groups = generation_step.collect_completion_groups

        def timed_collect(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return collect_groups(*args, **kwargs)
            finally:
                self.collect_seconds += time.perf_counter() - start

        generation_step.collect_completion_groups = timed_collect

    def time_backend(self, trainer: MaxEntGRPOTrainer) -> None:
        backend_generate = trainer.generation_backend.generate

        def timed_generate(prompts: list, counts: list[int]) -> list:
            start = time.perf_counter()
            try:
                return backend_generate(prompts, counts)
            finally:
                self.backend_seconds += time.perf_counter() - start

        trainer.generation_backend.generate = timed_generate  # type: ignore[method-assign]


def model_and_data(name: str, seed: int) -> tuple[Any, Any, Dataset]:
    """The model, its tokenizer and the prompts: the tiny model on plain prompts, or SmolLM2 on chat prompts."""
    if name == SMOLLM2:
        folder = smollm2_dir()
        tokenizer = AutoTokenizer.from_pretrained(folder)
        prompts = [[{"role": "user", "content": f"Write something about the number {i}."}] for i in range(256)]
        return AutoModelForCausalLM.from_pretrained(folder), tokenizer, Dataset.from_dict({"prompt": prompts})
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, seed=seed, hidden_size=64, num_layers=2, max_completion_length=16)
    return model, tokenizer, Dataset.from_dict({"prompt": [f"write something {i}:" for i in range(256)]})


def run(
    trainer_class: type, config_class: type, steps: int, seed: int, timer: PipelineTimer | None, model_name: str
) -> float:
    model, tokenizer, dataset = model_and_data(model_name, seed)
    with tempfile.TemporaryDirectory() as output_dir:
        args = config_class(
            output_dir=output_dir,
            per_device_train_batch_size=16,
            num_generations=8,
            max_completion_length=16,
            max_steps=steps,
            learning_rate=1e-3,
            logging_steps=steps,
            save_strategy="no",
            report_to="none",
            use_cpu=True,
            seed=seed,
            disable_tqdm=True,
        )
        trainer = trainer_class(
            model=model,
            reward_funcs=reward_num_unique_chars,
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
        )
        if timer is not None:
            timer.time_backend(trainer)
        start = time.perf_counter()
        trainer.train()
        return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="alternating (stock, ours) pairs")
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps per run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", choices=("tiny", SMOLLM2), default="tiny", help="the model both trainers train")
    options = parser.parse_args()
    hf_logging.set_verbosity_error()
    model = options.model

    run(GRPOTrainer, GRPOConfig, 2, options.seed, None, model)  # warm-up: imports, allocator, kernels
    run(MaxEntGRPOTrainer, MaxEntGRPOConfig, 2, options.seed, None, model)
    stock_times, ours_times = [], []
    timer = PipelineTimer()
    for round_index in range(options.rounds):
        stock_times.append(run(GRPOTrainer, GRPOConfig, options.steps, options.seed, None, model))
        ours_times.append(run(MaxEntGRPOTrainer, MaxEntGRPOConfig, options.steps, options.seed, timer, model))
        print(f"round {round_index + 1}: stock {stock_times[-1]:.4f} s/step, maxent {ours_times[-1]:.4f} s/step")

    stock, ours = statistics.median(stock_times), statistics.median(ours_times)
    total_steps = options.rounds * options.steps
    pipeline = (timer.collect_seconds - timer.backend_seconds) / total_steps
    print()
    print(f"{'trainer':<22}{'median s/step':>15}")
    print(f"{'GRPOTrainer (stock)':<22}{stock:>15.4f}")
    print(f"{'MaxEntGRPOTrainer':<22}{ours:>15.4f}")
    print(f"step-time ratio maxent/stock: {ours / stock:.3f}")
    print(
        f"helpers + validation (collect minus backend generate): {pipeline * 1e3:.3f} ms/step "
        f"({pipeline / ours:.2%} of a step)"
    )


if __name__ == "__main__":
    main()
