"""The `maxent-grpo` command: a small dispatcher over one module per subcommand (`maxent_grpo.cli.commands`).

Each command module has ``run(argv) -> int`` and imports what is heavy (torch, transformers,
TRL's trainer) only when it runs, so that `maxent-grpo --help` answers at once. Every command ends the same ways:
input that cannot be used with one line on stderr and exit code 2 (`UsageError`), a run that produced nothing usable
or a server that stopped with one line and exit code 1 (`TrainingFailed`), Ctrl-C with one line and exit code 130
(`Interrupted`); anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from maxent_grpo.cli.ansi_free_output import strip_ansi_when_redirected
from maxent_grpo.cli.command_errors import Interrupted, TrainingFailed
from maxent_grpo.cli.trackio_banner import say_local_trackio_logs_stay_local
from maxent_grpo.cli.usage_error import PROG, UsageError, UsageErrorParser

#: Each command's module (under `maxent_grpo.cli.commands`) and summary. The summaries live here, not in the
#: modules, so that ``--help`` imports none of them.
COMMANDS = {
    "demo": ("demo", "train GRPO and MaxEnt side by side on the tiny offline task and compare their answers"),
    "train": ("train", "train from a YAML recipe and/or --field value arguments (TRL style; --help lists them)"),
    "bench": ("bench", "run the benchmark harness (arguments are passed on to it)"),
    "config-reference": ("config_reference", "print or write the configuration reference (docs/configuration.md)"),
    "vllm-serve": ("vllm_serve", "start a vLLM server for server mode, wait until it is ready, print its URL"),
}


def _command(name: str):
    return importlib.import_module(f"maxent_grpo.cli.commands.{COMMANDS[name][0]}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `maxent-grpo` console script; returns the exit code."""
    parser = UsageErrorParser(
        prog=PROG,
        description="MaxEnt-GRPO for TRL. Commands:\n"
        + "\n".join(f"  {name:<18}{summary}" for name, (_, summary) in COMMANDS.items()),
        epilog=f"'{PROG} <command> --help' describes a command's arguments.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=list(COMMANDS), metavar="command", help="one of the commands above")
    parser.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    strip_ansi_when_redirected()
    say_local_trackio_logs_stay_local()
    argv = sys.argv[1:] if argv is None else list(argv)
    prog = PROG
    try:
        if not argv:
            raise UsageError(f"expected a command, one of {', '.join(COMMANDS)} ({PROG} --help describes them)")
        options = parser.parse_args(argv)
        prog = f"{PROG} {options.command}"
        return _command(options.command).run(options.args)
    except UsageError as error:
        print(f"{prog}: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    except TrainingFailed as error:
        print(f"{prog}: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
    except Interrupted as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:  # before training started, or in another command
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of stdout went away (`| head`): nothing left to say, and no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
