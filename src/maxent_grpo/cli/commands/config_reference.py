"""`maxent-grpo config-reference`: print the configuration reference, or rewrite its block in a Markdown file."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from maxent_grpo.cli.usage_error import PROG, UsageError, UsageErrorParser


def run(argv: Sequence[str]) -> int:
    """``maxent-grpo config-reference [--write FILE.md]``."""
    import maxent_grpo.cli.config_reference as config_reference

    parser = UsageErrorParser(
        prog=f"{PROG} config-reference",
        description="Print the configuration reference (Markdown), or rewrite the marked block of a Markdown file "
        "(docs/configuration.md in this repository).",
    )
    parser.add_argument("--write", type=Path, metavar="FILE.md", help="replace the block between the markers")
    options = parser.parse_args(argv)
    if options.write is None:
        print(config_reference.render_config_reference())
        return 0
    try:
        changed = config_reference.write_config_reference(options.write)
    except OSError as error:
        raise UsageError(f"cannot update {str(options.write)!r}: {error.strerror or error}") from error
    except ValueError as error:  # the file has no marked block
        raise UsageError(f"cannot update {str(options.write)!r}: {error}") from error
    print(f"{options.write}: configuration reference {'updated' if changed else 'already up to date'}")
    return 0
