"""The one format of the figures the package prints: training progress, a run's summary, the benchmarks' reports.

A figure has `SIGNIFICANT_DIGITS` significant digits, its trailing zeros kept, so that figures side by side read
alike: ``0.0781`` beside ``0.206``, ``[-0.390, 0.281]``; a number with more digits before the point keeps them all
(``1235``), an int is written as it is, an exact zero as ``0``.
"""

from __future__ import annotations

import math

#: The significant digits of every printed figure.
SIGNIFICANT_DIGITS = 3

_SIZE_UNITS = (("GB", 1e9), ("MB", 1e6), ("kB", 1e3))


def figure(value: float, signed: bool = False) -> str:
    """``value`` with `SIGNIFICANT_DIGITS` significant digits (``+`` before a positive one when ``signed``)."""
    sign = "+" if signed else ""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:{sign}d}"
    if value == 0.0:
        return "0"
    if not math.isfinite(value):
        return str(value)
    text = f"{value:{sign}#.{SIGNIFICANT_DIGITS}g}"
    if "e+" in text:  # more digits before the point than significant ones: all of them
        return f"{value:{sign}.0f}"
    return text.removesuffix(".")


def byte_size(size: int) -> str:
    """A size in bytes as people say it: ``2.10 GB``, ``541 MB``, ``12.0 kB``, ``40 bytes`` (powers of 1000)."""
    for unit, scale in _SIZE_UNITS:
        if size >= scale:
            return f"{figure(size / scale)} {unit}"
    return f"{size} bytes"
