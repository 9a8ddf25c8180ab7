"""Checks of the numbers the objective's functions and controllers take; a failure is one ValueError naming the value
and the allowed range."""

from __future__ import annotations

import math
import numbers
from typing import Any


def fail(name: str, value: Any, allowed: str) -> None:
    raise ValueError(f"{name}={value!r} is invalid: expected {allowed}.")


def is_number(value: Any) -> bool:
    """A real, non-NaN Python or NumPy scalar (bools excluded)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and not math.isnan(value)


def is_count(value: Any, low: int) -> bool:
    """An integer ``>= low`` (bools excluded)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= low


def check_finite(name: str, value: Any, *, low: float | None = None, strict: bool = False, low_name: str = "") -> None:
    """Raise unless ``value`` is a finite number, and ``> low`` (``strict``) or ``>= low`` when ``low`` is given."""
    ok = is_number(value) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if strict else value >= low
    if not ok:
        bound = "" if low is None else f" {'>' if strict else '>='} {low_name + ' = ' if low_name else ''}{low}"
        fail(name, value, f"a finite number{bound}")
