"""The contract every generation backend fulfils, and the completion type it returns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from maxent_grpo.training.generation.contract.episode_trace import EpisodeTrace


@dataclass(frozen=True, slots=True)
class TokenPrompt:
    """A prompt given as the exact token ids to condition on: every turn of a tool-calling episode reaches the backend
    this way (the first turn rendered with the tool schema, later turns the episode so far plus the tool results).

    A backend generates from ``ids`` as they are (no chat template, no re-tokenization) and reports what it really
    conditioned on as the completion's ``prompt_ids``; an episode whose later turn comes back with other prompt ids
    fails (its slot is retried).

    Attributes:
        ids: the prompt's token ids, [P].
    """

    ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Completion:
    """One sampled completion of one prompt, exactly as the backend produced it.

    Attributes:
        text: decoded completion text (special tokens skipped).
        prompt_ids: the prompt token ids the backend really conditioned on (it may truncate or re-tokenize). Shape [P].
        completion_ids: sampled token ids, EOS included when generation stopped on it. Shape [C].
        logprobs: per-token log-probabilities of ``completion_ids`` under the sampler, or None. Shape [C].
        failed: True when the backend knows this completion is unusable (it counts as missing and is retried).
        tool_mask: per completion token, 1 where the model wrote it and 0 where it came from outside (a tool result,
            an environment's feedback), or None when the model wrote every token. Shape [C]. Tokens marked 0 are not
            trained on and do not count in completion lengths.
        episode: the turns, tool results and environment of a tool-calling episode, or None for a single turn.
        weight_version: the training-weights version the sampler held while it generated this completion (the vLLM
            server backend with the disk transport sets it), or None when the backend does not know it.
        extra_fields: this row's values of what a ``rollout_func`` returned besides the token payload (TRL passes them
            to reward functions as keyword arguments), or None.
    """

    text: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float] | None = None
    failed: bool = False
    tool_mask: list[int] | None = None
    episode: EpisodeTrace | None = None
    weight_version: str | None = None
    extra_fields: dict[str, Any] | None = None

    def to_trl_payload(self) -> dict[str, Any]:
        """Return the token-level payload in the shape TRL's ``_generate`` produces for one row."""
        return {"prompt_ids": self.prompt_ids, "completion_ids": self.completion_ids, "logprobs": self.logprobs}


class GenerationStopped(RuntimeError):
    """Raised by a backend's ``generate`` when generation must not go on (a vLLM server that keeps refusing the
    training weights would only generate off-policy): unlike any other exception it is not a missing-slot fault, the
    generation step stops on every process with its message (one line)."""


class BackendContractError(GenerationStopped, ValueError):
    """A backend (or a ``rollout_func``) returned something that cannot be rows: a programming error, not a fault of
    one call, so training stops (on every process) instead of retrying."""


@runtime_checkable
class GenerationBackend(Protocol):
    """Anything that turns unique prompts and per-prompt counts into grouped completions.

    ``generate(prompts, counts)`` receives TRL prompts (text or chat messages, or `TokenPrompt` ids when the trainer
    has tools or environments), one per unique prompt, and how many completions each still needs. It returns one list
    per prompt, aligned with ``prompts``. A group may be shorter than asked (the missing slots are retried), never
    longer (extra completions are trimmed). Raising makes every slot of the call missing for this round, except
    `GenerationStopped`, which stops training.

    ``generate`` may be called with empty lists: every process makes the same sequence of calls in a step (a process
    whose groups are all complete still takes part in a retry round that another process needs), so a backend whose
    generation is a collective (sharded weights) must join it then; any other backend simply returns ``[]``.

    Everything else the trainer may ask of a backend (weight sync, deadlines, statistics and failure reasons, request
    cancellation, token prompts, context length, sampler log-probs, weight versions) is an optional capability, one
    small protocol each in `capabilities`, checked with `isinstance`.
    """

    def generate(self, prompts: Sequence[Any], counts: Sequence[int]) -> list[list[Completion]]: ...
