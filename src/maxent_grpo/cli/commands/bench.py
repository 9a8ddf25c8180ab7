"""`maxent-grpo bench`: the A/B benchmark harness (`maxent_grpo.bench`), its arguments passed on to it."""

from __future__ import annotations

from collections.abc import Sequence

from maxent_grpo.cli.usage_error import UsageError


def run(argv: Sequence[str]) -> int:
    """``maxent-grpo bench ARGS``: the harness's own parser reads ``ARGS``."""
    try:
        from maxent_grpo.bench import main as bench_main
    except ModuleNotFoundError as error:
        if error.name != "maxent_grpo.bench":
            raise
        raise UsageError("the benchmark harness (maxent_grpo.bench) is not part of this installation") from error
    return bench_main(list(argv))
