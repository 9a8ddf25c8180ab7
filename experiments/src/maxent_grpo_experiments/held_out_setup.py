"""The set-up every held-out benchmark shares: its tiny model, the base model's supervised run, how it is sampled.

`benchmarks/reasoning_boundary.py`, `benchmarks/multi_token_answers.py` and `benchmarks/minority_routes.py` each
describe their model and corpus as one `HeldOutSetup`; the rest follows from it alike for the three: the character
tokenizer (`HeldOutSetup.tokenizer`), the seed's base model (`HeldOutSetup.pretrain_base`, by
`maxent_grpo_experiments.from_base.pretrain_base`), completions sampled as in training (`HeldOutSetup.sample`), the
exact probability of a correct one and the model's own pass@k (`HeldOutSetup.correct_probabilities`,
`HeldOutSetup.exact_pass_at_k`, by `maxent_grpo_experiments.held_out`), and the settings their JSON records.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from maxent_grpo.answer_sampling import sample_completions
from maxent_grpo.tiny_model import build_tiny_tokenizer
from maxent_grpo_experiments import held_out
from maxent_grpo_experiments.from_base import pretrain_base

__all__ = ["KS", "HeldOutSetup"]

#: The k of the held-out benchmarks' pass@k.
KS = (1, 4, 16, 64, 256)


@dataclass(frozen=True)
class HeldOutSetup:
    """A held-out benchmark's model and base model: what its JSON records under ``model`` and ``pretrain``.

    Attributes:
        alphabet: the character tokenizer's characters (one character, one token).
        hidden_size: the tiny model's hidden size.
        num_layers: its decoder layers.
        completion_length: the most tokens of a completion (its EOS token included where ``stops``).
        corpus_prompts: the prompts of the base model's corpus.
        sample_corpus: the seed's corpus, ``sample_corpus(corpus_prompts, seed=seed, **corpus)``: (prompt,
            completion) pairs.
        corpus: the corpus's settings (per prompt, wrong share, skew).
        correct_completions: a prompt's correct completions (distinct, as texts).
        stops: whether a completion must end with EOS: the base model learns to stop, a sample is its text up to the
            first EOS with other special tokens kept by name, and a correct completion's probability includes EOS.
        pretrain_steps: AdamW steps of the base model's supervised run.
        pretrain_batch: examples per step (every held-out benchmark's: 256).
        pretrain_learning_rate: its (constant) learning rate (every held-out benchmark's: 3e-3).
        ks: the k of pass@k.
    """

    alphabet: str
    hidden_size: int
    num_layers: int
    completion_length: int
    corpus_prompts: tuple[str, ...]
    sample_corpus: Callable[..., list[tuple[str, str]]]
    corpus: Mapping[str, Any]
    correct_completions: Callable[[str], Sequence[str]]
    stops: bool
    pretrain_steps: int
    pretrain_batch: int = 256
    pretrain_learning_rate: float = 3e-3
    ks: tuple[int, ...] = KS

    def tokenizer(self) -> PreTrainedTokenizerBase:
        """The character tokenizer over `alphabet`."""
        return build_tiny_tokenizer(self.alphabet)

    def pretrain_base(self, tokenizer: PreTrainedTokenizerBase, seed: int) -> PreTrainedModel:
        """The seed's base model: the tiny model after a short supervised run on the seed's corpus (the loss on the
        completion, and its EOS where ``stops``)."""
        return pretrain_base(
            tokenizer,
            self.sample_corpus(self.corpus_prompts, seed=seed, **self.corpus),
            seed=seed,
            hidden_size=self.hidden_size,
            num_layers=self.num_layers,
            completion_length=self.completion_length,
            steps=self.pretrain_steps,
            batch=self.pretrain_batch,
            learning_rate=self.pretrain_learning_rate,
            append_eos=self.stops,
        )

    def sample(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str], n: int, seed: int
    ) -> list[list[str]]:
        """``n`` completions per prompt at temperature 1, as in training; where ``stops``, up to the first EOS with
        other special tokens kept by name (so a completion is correct only if its tokens spell a correct one and then
        stop). The global RNG is left untouched."""
        return sample_completions(
            model, tokenizer, prompts, n, seed, max_new_tokens=self.completion_length, keep_special_tokens=self.stops
        )

    def correct_probabilities(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str]
    ) -> list[float]:
        """Per prompt, the exact probability that one completion sampled at temperature 1 (as `sample` does) is
        correct: the sum over its correct completions (EOS included where ``stops``) of their probabilities, read off
        the logits, free of sampling noise."""
        return held_out.correct_probabilities(
            model, tokenizer, prompts, self.correct_completions, append_eos=self.stops
        )

    def exact_pass_at_k(self, probabilities: Sequence[float]) -> dict[str, float]:
        """Mean over prompts of the model's own pass@k, ``1 - (1 - p) ** k``, for every k of `ks` (k samples drawn
        independently from the model, where the unbiased estimator draws them from n fixed samples)."""
        return held_out.exact_pass_at_k(probabilities, self.ks)

    def model_settings(self) -> dict[str, Any]:
        """The model's settings, as the JSON records them."""
        return {"hidden_size": self.hidden_size, "num_layers": self.num_layers, "alphabet": self.alphabet}

    def pretrain_settings(self) -> dict[str, Any]:
        """The base model's supervised run, as the JSON records it."""
        return {
            **self.corpus,
            "steps": self.pretrain_steps,
            "batch": self.pretrain_batch,
            "learning_rate": self.pretrain_learning_rate,
        }
