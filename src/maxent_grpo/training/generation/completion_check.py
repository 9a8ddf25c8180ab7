"""Which completions are data (invariant I5): anything else counts as a missing slot and is retried."""

from __future__ import annotations

from dataclasses import dataclass

from maxent_grpo.training.generation.backends.protocol import Completion


@dataclass(frozen=True)
class CompletionCheck:
    """Why a completion is unusable, or None (a `collect.CompletionCheck` callable).

    Attributes:
        vocab_size: the tokenizer's vocabulary size; every prompt and completion id must lie in ``[0, vocab_size)``.
        needs_logprobs: TRL's importance-sampling correction is on: a completion without sampler log-probs is
            unusable (one such row would leave the whole batch without them).
    """

    vocab_size: int
    needs_logprobs: bool = False

    def __call__(self, completion: Completion) -> str | None:
        vocab_size = self.vocab_size
        if completion.failed:
            return "backend marked the completion as failed"
        if completion.logprobs is None and self.needs_logprobs:
            return "no sampler logprobs (vllm_importance_sampling_correction needs them)"
        if not completion.completion_ids:
            return "empty completion"
        if not completion.prompt_ids:
            return "empty prompt ids"
        if any(not (0 <= t < vocab_size) for t in completion.completion_ids):
            return f"completion token id outside the vocabulary [0, {vocab_size})"
        if any(not (0 <= t < vocab_size) for t in completion.prompt_ids):
            return f"prompt token id outside the vocabulary [0, {vocab_size})"
        if completion.logprobs is not None and len(completion.logprobs) != len(completion.completion_ids):
            return "logprobs length differs from completion length"
        if completion.tool_mask is not None:
            if len(completion.tool_mask) != len(completion.completion_ids):
                return "tool_mask length differs from completion length"
            if any(flag not in (0, 1) for flag in completion.tool_mask):
                return "tool_mask holds values other than 0 and 1"
        return None
