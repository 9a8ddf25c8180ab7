"""A custom mode key: group completions by the answer they give, as you define it.

Task: answer "pick a vowel:" with a vowel, in either case ("a" and "A" are both right). The listwise objective spreads
each group's target weight over its distinct answers, and what counts as one answer is the mode key's call. The
built-in ``first_token`` would treat "a" and "A" as two answers; `vowel_class` below maps both to "a", so the entropy
acts on the five vowels whatever their case.

A mode key is any callable ``text -> hashable`` (or ``(text, completion_ids) -> hashable``; None means "no answer").
The config names it by dotted path, so recipes can use it too. From the repository root:

    python examples/custom_mode_key.py --max-steps 30
    maxent-grpo train --config configs/recipes/demo.yaml --maxent_mode_key examples.custom_mode_key:vowel_class
"""

from __future__ import annotations

import argparse
import math
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from maxent_grpo import MaxEntGRPOConfig, MaxEntGRPOTrainer
from maxent_grpo.demo import TASK, vowel_dataset
from maxent_grpo.rewards import VOWELS, completion_text
from maxent_grpo.tiny_model import build_tiny_model, build_tiny_tokenizer

# This module by dotted path: "custom_mode_key" when run as a script (its folder is then on sys.path),
# "examples.custom_mode_key" when run with `python -m examples.custom_mode_key`.
MODE_KEY = f"{__spec__.name if __spec__ is not None else Path(__file__).stem}:vowel_class"


def vowel_class(text: str) -> str | None:
    """The vowel a completion starts with, in lower case; None when it does not start with a vowel."""
    first = text.lstrip()[:1].lower()
    return first if first and first in VOWELS else None


def any_case_vowel_reward(completions: list, **kwargs: Any) -> list[float]:
    """1.0 when the completion starts with a vowel of either case."""
    return [float(vowel_class(completion_text(c)) is not None) for c in completions]


def describe(answers: Sequence[str]) -> str:
    classes = Counter(key for key in map(vowel_class, answers) if key is not None)
    total = sum(classes.values())
    entropy = -sum(n / total * math.log(n / total) for n in classes.values()) if total else 0.0
    return (
        f"reward {total / len(answers):.2f}, vowels {len(classes)}/{len(VOWELS)}, "
        f"coverage {entropy / math.log(len(VOWELS)):.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-steps", type=int, default=30)
    options = parser.parse_args()

    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, seed=0)
    print(f"before: {describe(TASK.sample_answers(model, tokenizer, 256, seed=0))}")
    with tempfile.TemporaryDirectory() as output_dir:
        args = MaxEntGRPOConfig(
            output_dir=output_dir,
            per_device_train_batch_size=16,
            num_generations=16,
            max_completion_length=4,
            max_steps=options.max_steps,
            learning_rate=1e-2,
            maxent_objective="listwise",
            maxent_mode_key=MODE_KEY,
            maxent_tau=0.3,
            logging_steps=5,
            report_to="none",
            save_strategy="no",
            use_cpu=True,
        )
        trainer = MaxEntGRPOTrainer(
            model=model,
            reward_funcs=any_case_vowel_reward,
            args=args,
            train_dataset=vowel_dataset(16 * options.max_steps),
            processing_class=tokenizer,
        )
        trainer.train()
    print(f"after:  {describe(TASK.sample_answers(trainer.model, tokenizer, 256, seed=0))}")


if __name__ == "__main__":
    main()
