"""A vLLM worker extension for tests: the package's reload extension, with reload faults injected on demand.

A real server cannot be made to fail a reload, or to load only part of the weights, at a chosen moment; this one
reads the file named by ``MAXENT_TEST_RELOAD_FAULTS`` in its environment before each reload: ``fail <n>`` fails the
next n reloads (``fail always``: all of them), ``partial always`` reports a stale parameter without loading anything,
and an empty file (or none) injects nothing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from maxent_grpo.serving.reload_extension import DiskReloadExtension

FAULTS_VARIABLE = "MAXENT_TEST_RELOAD_FAULTS"
QUALNAME = f"{__name__}.FaultyReloadExtension"


class FaultyReloadExtension(DiskReloadExtension):
    def maxent_reload_weights(self, weights_path: str, **options: str) -> dict[str, Any]:
        control = Path(os.environ[FAULTS_VARIABLE])
        words = control.read_text().split() if control.exists() else []
        if words == ["partial", "always"]:
            return {"tensors": 0, "stale": ["injected.partial.weight"]}
        if words[:1] == ["fail"]:
            if words[1] != "always":
                left = int(words[1]) - 1
                control.write_text(f"fail {left}" if left > 0 else "")
            raise RuntimeError("injected reload failure")
        return super().maxent_reload_weights(weights_path, **options)
