"""Which completions are data (invariant I5): anything else counts as a missing slot and is retried.

`CompletionCheck` is the one definition of a usable `Completion`. The generation step applies it to every completion
a backend returns; a backend may apply its `CompletionCheck.completion_ids_problem` to the ids it receives, to mark
a completion failed at the source (the vLLM server backend does, and counts such answers as bad data).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from maxent_grpo.training.generation.contract.protocol import Completion


@dataclass(frozen=True)
class CompletionCheck:
    """Why a completion is unusable, or None: call it on a `Completion`.

    Attributes:
        vocab_size: the tokenizer's vocabulary size; every prompt and completion id must lie in ``[0, vocab_size)``.
        needs_logprobs: TRL's importance-sampling correction is on: a completion without sampler log-probs is
            unusable (one such row would leave the whole batch without them).
    """

    vocab_size: int
    needs_logprobs: bool = False

    def __call__(self, completion: Completion) -> str | None:
        """Return why ``completion`` cannot be trained on, or None when it can.

        Args:
            completion: what a backend returned for one slot.

        Returns:
            The first problem found (failed, no log-probs although needed, empty or out-of-vocabulary ids, log-probs
            or tool mask of the wrong length), or None.
        """
        if completion.failed:
            return "backend marked the completion as failed"
        if completion.logprobs is None and self.needs_logprobs:
            return "no sampler logprobs (vllm_importance_sampling_correction needs them)"
        problem = self.completion_ids_problem(completion.completion_ids)
        if problem is not None:
            return problem
        if not completion.prompt_ids:
            return "empty prompt ids"
        if not self._in_vocabulary(completion.prompt_ids):
            return f"prompt token id outside the vocabulary [0, {self.vocab_size})"
        if completion.logprobs is not None and len(completion.logprobs) != len(completion.completion_ids):
            return "logprobs length differs from completion length"
        if completion.tool_mask is not None:
            if len(completion.tool_mask) != len(completion.completion_ids):
                return "tool_mask length differs from completion length"
            if any(flag not in (0, 1) for flag in completion.tool_mask):
                return "tool_mask holds values other than 0 and 1"
        return None

    def completion_ids_problem(self, completion_ids: Sequence[int]) -> str | None:
        """Return why a completion's sampled token ids are unusable, or None when they are fine.

        Args:
            completion_ids: the sampled token ids.

        Returns:
            ``"empty completion"`` when there are none, a message naming the vocabulary when one lies outside
            ``[0, vocab_size)``, else None.
        """
        if not completion_ids:
            return "empty completion"
        if not self._in_vocabulary(completion_ids):
            return f"completion token id outside the vocabulary [0, {self.vocab_size})"
        return None

    def _in_vocabulary(self, token_ids: Sequence[int]) -> bool:
        return all(0 <= t < self.vocab_size for t in token_ids)
