"""The libraries `maxent-grpo bench` needs beyond the package's own dependencies: the ``bench`` extra.

SciPy computes the statistics (`maxent_grpo.bench.stats`) and matplotlib draws the plot; a training installation does
without both, so they come with ``pip install 'maxent-grpo[bench]'`` (also part of the ``dev`` extra).
"""

from __future__ import annotations

import importlib.util

#: The top-level modules of the ``bench`` extra.
BENCH_MODULES = ("matplotlib", "scipy")
INSTALL_HINT = "pip install 'maxent-grpo[bench]'"


def missing_modules() -> list[str]:
    """The modules of `BENCH_MODULES` that this environment cannot import, in that order."""
    return [name for name in BENCH_MODULES if importlib.util.find_spec(name) is None]
