"""The command line of the held-out benchmarks: seeds, budget, samples, MaxEnt overrides, methods, entropy grid."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from maxent_grpo.bench.config_override import maxent_override
from maxent_grpo.bench.entropy_grid import check_entropy_grid
from maxent_grpo.bench.entropy_grid_option import add_entropy_grid_argument
from maxent_grpo.bench.held_out_methods import DEFAULT_METHODS, METHODS
from maxent_grpo.bench.output import add_output_arguments

__all__ = ["add_held_out_arguments", "check_held_out_arguments", "parse_held_out_args"]


def add_held_out_arguments(
    parser: argparse.ArgumentParser, *, steps: int, samples: int, samples_help: str, maxent_example: str
) -> None:
    """Add the options every held-out benchmark has.

    Args:
        parser: the benchmark's parser.
        steps: the default ``--steps``.
        samples: the default ``--samples``.
        samples_help: the help of ``--samples``.
        maxent_example: an example ``FIELD=VALUE`` in the help of ``--maxent``.
    """
    parser.add_argument("--seeds", type=int, default=11, help="number of seeds (first-seed .. first-seed+seeds-1)")
    parser.add_argument(
        "--first-seed", type=int, default=0, help="the first seed (e.g. 11: seeds that no setting was chosen on)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes that run seeds side by side (default: 1); a seed's figures do not depend on it, so give as "
        "many as the machine has cores for seeds",
    )
    parser.add_argument("--steps", type=int, default=steps, help="optimizer steps per RL run")
    parser.add_argument("--prompts-per-step", type=int, default=8, help="prompt groups per optimizer step")
    parser.add_argument("--samples", type=int, default=samples, help=samples_help)
    parser.add_argument(
        "--maxent",
        action="append",
        type=maxent_override,
        default=[],
        metavar="FIELD=VALUE",
        help=f"MaxEntGRPOConfig override of the MaxEnt run (repeatable), e.g. {maxent_example}",
    )
    parser.add_argument(
        "--methods",
        nargs="+",
        choices=list(METHODS),
        default=list(DEFAULT_METHODS),
        help=f"RL methods to run (default: {' '.join(DEFAULT_METHODS)}; grpo_kl, GRPO with TRL's KL to the base, only "
        "when named)",
    )
    add_entropy_grid_argument(
        parser,
        ", the best kept (default: %(default)s; one value runs that one, e.g. on fresh seeds)",
    )


def check_held_out_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace, ks: Sequence[int]) -> None:
    """Refuse fewer ``--samples`` than the largest k of ``ks``, no seed or a negative first one, no worker, and a
    grid that needs stock GRPO without it (`maxent_grpo.bench.entropy_grid.check_entropy_grid`), through
    ``parser.error``; put ``args.methods`` in run order."""
    if args.samples < max(ks):
        parser.error(f"--samples must be at least {max(ks)}")
    if args.seeds < 1 or args.first_seed < 0:
        parser.error(f"--seeds must be at least 1 and --first-seed at least 0, got {args.seeds} and {args.first_seed}")
    if args.workers < 1:
        parser.error(f"--workers must be at least 1, got {args.workers}")
    args.methods = [m for m in METHODS if m in args.methods]  # the run order, whatever the order given
    check_entropy_grid(parser, args)


def parse_held_out_args(
    argv: Sequence[str] | None,
    *,
    description: str,
    name: str,
    committed: Path,
    ks: Sequence[int],
    steps: int,
    samples: int,
    samples_help: str,
    maxent_example: str,
) -> argparse.Namespace:
    """Parse a held-out benchmark's command line: `add_held_out_arguments`, the output folder
    (`maxent_grpo.bench.output.add_output_arguments`), then `check_held_out_arguments`.

    Args:
        argv: the arguments (None: ``sys.argv[1:]``).
        description: the parser's description.
        name: the benchmark's name, that of its default output folder.
        committed: the folder of its committed results (``--update-results``).
        ks: the k of pass@k; ``--samples`` must reach the largest.
        steps: the default ``--steps``.
        samples: the default ``--samples``.
        samples_help: the help of ``--samples``.
        maxent_example: an example ``FIELD=VALUE`` in the help of ``--maxent``.

    Returns:
        The parsed arguments.
    """
    parser = argparse.ArgumentParser(description=description)
    add_held_out_arguments(
        parser, steps=steps, samples=samples, samples_help=samples_help, maxent_example=maxent_example
    )
    add_output_arguments(parser, name, committed)
    args = parser.parse_args(argv)
    check_held_out_arguments(parser, args, ks)
    return args
