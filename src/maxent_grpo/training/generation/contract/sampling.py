"""Sampling settings shared by the vLLM backends, validated once with errors that name the field and the range."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


def check_number(name: str, value: Any, *, low: float, high: float = math.inf, low_open: bool = False) -> float:
    """Return ``value`` as a float, or raise ValueError naming the field, the value and the allowed range."""
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    in_range = is_number and math.isfinite(value) and (value > low if low_open else value >= low) and value <= high
    if not in_range:
        bracket = "(" if low_open else "["
        upper = "inf)" if high == math.inf else f"{high}]"
        raise ValueError(f"{name} must be a finite number in {bracket}{low}, {upper}, got {value!r}")
    return float(value)


def check_int(name: str, value: Any, *, low: int, allowed: str | None = None) -> int:
    """Return ``value`` if it is an int >= ``low``, else raise ValueError naming the field, value and allowed range."""
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name} must be {allowed or f'an integer >= {low}'}, got {value!r}")
    return value


def check_top_k(value: Any) -> int:
    """vLLM turns top-k off with 0 or -1; anything else must be a positive integer."""
    return check_int("top_k", value, low=-1, allowed="-1, 0 (off) or a positive integer")


def _optional_dict(name: str, value: Any) -> dict[str, Any]:
    """A copy of an optional keyword dict, or ValueError naming the field when it is not a dict."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a dict or None, got {value!r}")
    return dict(value)


@dataclass(frozen=True)
class SamplingSettings:
    """How the vLLM backends sample, checked on creation: the one home of these fields.

    The trainer builds it from TRL's own fields (`from_trainer`); a user building a backend by hand passes one.

    Attributes:
        max_tokens: completion length cap, >= 1.
        temperature, top_p, top_k, min_p, repetition_penalty: vLLM's sampling parameters (``top_k`` 0 or -1 = off).
        generation_kwargs: extra sampling fields (vLLM ``SamplingParams`` fields or request fields such as ``seed``,
            ``logprobs``, ``model``), overriding the ones above; ``logprobs: None`` turns sampler log-probs off.
        chat_template_kwargs: passed to the chat template of conversational prompts.
        structured_outputs_regex: a regular expression every completion must match (TRL's
            ``vllm_structured_outputs_regex``).
        process_index: the training process whose backend samples; with a ``seed`` in ``generation_kwargs`` each
            request gets its own seed derived from it and from this index (see `request_seeds`).
    """

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    generation_kwargs: dict[str, Any] = field(default_factory=dict)
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    structured_outputs_regex: str | None = None
    process_index: int = 0

    def __post_init__(self) -> None:
        check_int("max_tokens", self.max_tokens, low=1)
        check_number("temperature", self.temperature, low=0.0, low_open=True)
        check_number("top_p", self.top_p, low=0.0, high=1.0, low_open=True)
        check_top_k(self.top_k)
        check_number("min_p", self.min_p, low=0.0, high=1.0)
        check_number("repetition_penalty", self.repetition_penalty, low=0.0, low_open=True)
        check_int("process_index", self.process_index, low=0)
        # Frozen: the checked copies replace what was given (None becomes an empty dict).
        for name in ("generation_kwargs", "chat_template_kwargs"):
            object.__setattr__(self, name, _optional_dict(name, getattr(self, name)))
        regex = self.structured_outputs_regex
        if regex is not None and not isinstance(regex, str):
            raise ValueError(f"structured_outputs_regex must be a string or None, got {regex!r}")

    @classmethod
    def from_trainer(cls, trainer: Any) -> SamplingSettings:
        """The settings of a `GRPOTrainer`'s own fields, as TRL's vLLM generation reads them."""
        return cls(
            max_tokens=trainer.max_completion_length,
            temperature=trainer.temperature,
            top_p=trainer.top_p,
            top_k=trainer.top_k if trainer.top_k is not None else 0,
            min_p=trainer.min_p if trainer.min_p is not None else 0.0,
            repetition_penalty=trainer.repetition_penalty,
            generation_kwargs=trainer.args.generation_kwargs,
            chat_template_kwargs=trainer.chat_template_kwargs,
            structured_outputs_regex=trainer.args.vllm_structured_outputs_regex,
            process_index=trainer.accelerator.process_index,
        )

    @property
    def seed(self) -> int | None:
        """The user's sampling seed (``generation_kwargs["seed"]``), from which each request's seed is derived."""
        seed = self.generation_kwargs.get("seed")
        return None if seed is None else check_int("generation_kwargs['seed']", seed, low=-(2**63))

    @property
    def wants_logprobs(self) -> bool:
        """Whether the sampled tokens' log-probs are asked for (``logprobs: 0``) unless ``generation_kwargs`` turns
        them off with ``logprobs: None``."""
        return self.generation_kwargs.get("logprobs", 0) is not None

    def sampling_fields(self) -> dict[str, Any]:
        """The six sampling parameters every vLLM request or `SamplingParams` takes (besides ``n``)."""
        return {
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "min_p": self.min_p,
            "repetition_penalty": self.repetition_penalty,
        }
