"""The ``--maxent FIELD=VALUE`` option of the objective benchmarks: one `MaxEntGRPOConfig` field override."""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["maxent_override"]


def maxent_override(item: str) -> tuple[str, Any]:
    """One ``--maxent FIELD=VALUE`` config override, as an argparse type.

    VALUE is read as JSON when it parses (numbers, null), else as text.

    Raises:
        argparse.ArgumentTypeError: without ``=`` or without a field name.
    """
    name, sep, value = item.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected FIELD=VALUE, got {item!r}")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value
