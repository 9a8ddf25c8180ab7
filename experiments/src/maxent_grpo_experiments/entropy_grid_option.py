"""The ``--entropy-grid C [C ...]`` option of the objective benchmarks: the fixed ``entropy_coef`` values tried.

Every objective benchmark runs the ``grpo_entropy_fixed`` arm of `maxent_grpo_experiments.trl_baselines` on each value
(default `maxent_grpo_experiments.trl_baselines.FIXED_ENTROPY_GRID`) and keeps the best one.
"""

from __future__ import annotations

import argparse

from maxent_grpo_experiments.trl_baselines import FIXED_ENTROPY_GRID, fixed_entropy

__all__ = ["add_entropy_grid_argument", "entropy_coefficient"]


def entropy_coefficient(item: str) -> float:
    """One ``--entropy-grid`` value, as an argparse type: a fixed ``entropy_coef`` > 0.

    Raises:
        argparse.ArgumentTypeError: for a value that is not a number > 0.
    """
    try:
        return fixed_entropy(float(item))["entropy_coef"]
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"expected an entropy_coef > 0, got {item!r}") from error


def add_entropy_grid_argument(parser: argparse.ArgumentParser, help_tail: str = " (default: %(default)s)") -> None:
    """Add ``--entropy-grid C [C ...]`` to ``parser``.

    Args:
        parser: the benchmark's parser.
        help_tail: what the option's help says after "fixed entropy_coef values tried for grpo_entropy_fixed" (by
            default the default values).
    """
    parser.add_argument(
        "--entropy-grid",
        nargs="+",
        type=entropy_coefficient,
        default=list(FIXED_ENTROPY_GRID),
        metavar="C",
        help=f"fixed entropy_coef values tried for grpo_entropy_fixed{help_tail}",
    )
