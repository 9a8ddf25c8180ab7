"""Train with your own generation backend: any object with `generate(prompts, counts)`.

This backend wraps the model's own `generate` but samples each prompt's group separately and, to show what the
trainer does with an unreliable backend, loses a fraction of the completions it was asked for. The trainer retries
each short group for just its deficit and drops what stays incomplete, and the logs say so
(`generation/retried_prompts`, `generation/dropped_prompts`).

Runs offline on CPU in about a minute:

    python examples/custom_backend.py --max-steps 10
"""

from __future__ import annotations

import argparse
import random
import tempfile
from collections.abc import Sequence

import torch
from datasets import Dataset
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from maxent_grpo import Completion, MaxEntGRPOConfig, MaxEntGRPOTrainer
from maxent_grpo.rewards import vowel_start_reward
from maxent_grpo.tiny_model import build_tiny_model, build_tiny_tokenizer


class LossyLocalBackend:
    """Samples with a Hugging Face model, one prompt at a time, and loses `loss_rate` of the completions."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        max_new_tokens: int = 8,
        loss_rate: float = 0.2,
        seed: int = 0,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.loss_rate = loss_rate
        self.rng = random.Random(seed)

    @torch.no_grad()
    def generate(self, prompts: Sequence[str], counts: Sequence[int]) -> list[list[Completion]]:
        groups: list[list[Completion]] = []
        for prompt, count in zip(prompts, counts, strict=True):
            prompt_ids = self.tokenizer(prompt)["input_ids"]
            if count == 0:
                groups.append([])
                continue
            inputs = torch.tensor([prompt_ids] * count, device=self.model.device)
            outputs = self.model.generate(
                input_ids=inputs,
                attention_mask=torch.ones_like(inputs),
                do_sample=True,
                max_new_tokens=self.max_new_tokens,
                pad_token_id=self.tokenizer.pad_token_id,
            )
            group = []
            for row in outputs[:, len(prompt_ids) :].tolist():
                if self.rng.random() < self.loss_rate:
                    continue  # a lost completion: the trainer asks again for the deficit
                if self.tokenizer.eos_token_id in row:
                    row = row[: row.index(self.tokenizer.eos_token_id) + 1]
                text = self.tokenizer.decode(row, skip_special_tokens=True)
                group.append(Completion(text=text, prompt_ids=prompt_ids, completion_ids=row))
            groups.append(group)
        return groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--loss-rate", type=float, default=0.2)
    options = parser.parse_args()

    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, seed=0)
    backend = LossyLocalBackend(model, tokenizer, loss_rate=options.loss_rate)
    dataset = Dataset.from_dict({"prompt": ["pick a vowel:"] * 64})
    with tempfile.TemporaryDirectory() as output_dir:
        args = MaxEntGRPOConfig(
            output_dir=output_dir,
            per_device_train_batch_size=8,
            num_generations=8,
            max_completion_length=8,
            max_steps=options.max_steps,
            learning_rate=3e-3,
            logging_steps=1,
            report_to="none",
            save_strategy="no",
            use_cpu=True,
            generation_max_retries=2,
        )
        trainer = MaxEntGRPOTrainer(
            model=model,
            reward_funcs=vowel_start_reward,
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            generation_backend=backend,
        )
        trainer.train()
    retried = sum(e.get("generation/retried_prompts", 0) for e in trainer.state.log_history)
    dropped = sum(e.get("generation/dropped_prompts", 0) for e in trainer.state.log_history)
    print(f"retried prompt groups: {retried:.0f}, dropped prompt groups: {dropped:.0f}")


if __name__ == "__main__":
    main()
