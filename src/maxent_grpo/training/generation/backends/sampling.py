"""Sampling settings shared by the vLLM backends, validated once with errors that name the field and the range."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
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


@dataclass(frozen=True)
class SamplingSettings:
    """The sampling fields a vLLM request or `SamplingParams` takes (besides ``n``), checked on creation."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        check_int("max_tokens", self.max_tokens, low=1)
        check_number("temperature", self.temperature, low=0.0, low_open=True)
        check_number("top_p", self.top_p, low=0.0, high=1.0, low_open=True)
        check_top_k(self.top_k)
        check_number("min_p", self.min_p, low=0.0, high=1.0)
        check_number("repetition_penalty", self.repetition_penalty, low=0.0, low_open=True)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
