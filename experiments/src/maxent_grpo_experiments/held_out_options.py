"""The command line of the held-out benchmarks: seeds, budget, samples, MaxEnt overrides, methods, entropy grid."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from maxent_grpo.bench.output import add_output_arguments
from maxent_grpo_experiments.config_override import maxent_override
from maxent_grpo_experiments.entropy_grid import check_entropy_grid
from maxent_grpo_experiments.entropy_grid_option import add_entropy_grid_argument
from maxent_grpo_experiments.held_out_methods import DEFAULT_METHODS, METHODS

__all__ = ["HeldOutCommand", "add_held_out_arguments", "check_held_out_arguments"]


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
    grid that needs stock GRPO without it (`maxent_grpo_experiments.entropy_grid.check_entropy_grid`), through
    ``parser.error``; put ``args.methods`` in run order."""
    if args.samples < max(ks):
        parser.error(f"--samples must be at least {max(ks)}")
    if args.seeds < 1 or args.first_seed < 0:
        parser.error(f"--seeds must be at least 1 and --first-seed at least 0, got {args.seeds} and {args.first_seed}")
    if args.workers < 1:
        parser.error(f"--workers must be at least 1, got {args.workers}")
    args.methods = [m for m in METHODS if m in args.methods]  # the run order, whatever the order given
    check_entropy_grid(parser, args)


@dataclass(frozen=True)
class HeldOutCommand:
    """A held-out benchmark's command line: the options every one has, with the script's defaults and help.

    The script names the rest: the benchmark's name is the script's (``benchmarks/<name>.py``), that of its files
    and of its default output folder; its committed results are ``benchmarks/results/<name>`` (``--update-results``);
    the parser's description is the first line of its docstring.

    Attributes:
        script: the script's path (its ``__file__``).
        docstring: the script's docstring.
        steps: the default ``--steps``.
        samples: the default ``--samples``.
        samples_help: the help of ``--samples``.
        maxent_example: an example ``FIELD=VALUE`` in the help of ``--maxent``.
    """

    script: str
    docstring: str
    steps: int
    samples: int
    samples_help: str
    maxent_example: str

    @property
    def name(self) -> str:
        """The benchmark's name: the script's, without ``.py``."""
        return Path(self.script).stem

    @property
    def committed(self) -> Path:
        """The folder of the committed results: ``results/<name>`` beside the script."""
        return Path(self.script).resolve().parent / "results" / self.name

    def parse_args(self, argv: Sequence[str] | None, ks: Sequence[int]) -> argparse.Namespace:
        """Parse the command line: `add_held_out_arguments`, the output folder
        (`maxent_grpo.bench.output.add_output_arguments`), then `check_held_out_arguments` against the k of pass@k
        ``ks`` (``--samples`` must reach the largest).

        Args:
            argv: the arguments (None: ``sys.argv[1:]``).
            ks: the k of pass@k.

        Returns:
            The parsed arguments.
        """
        parser = argparse.ArgumentParser(description=self.docstring.splitlines()[0])
        add_held_out_arguments(
            parser,
            steps=self.steps,
            samples=self.samples,
            samples_help=self.samples_help,
            maxent_example=self.maxent_example,
        )
        add_output_arguments(parser, self.name, self.committed)
        args = parser.parse_args(argv)
        check_held_out_arguments(parser, args, ks)
        return args
