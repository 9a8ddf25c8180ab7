"""The code blocks of the README and the docs that a user would paste, found by the marker line above each one.

A block is marked by a line ``<!-- snippet: NAME -->`` right before its opening fence (an HTML comment: invisible on
GitHub and in the built docs). The tests run each marked block, shortened only by the arguments they add.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def snippet(path: Path, name: str) -> str:
    """The code of the fenced block right after ``<!-- snippet: NAME -->`` in ``path`` (exactly one such marker)."""
    text = path.read_text(encoding="utf-8")
    marker = f"<!-- snippet: {name} -->\n"
    assert text.count(marker) == 1, f"{path.relative_to(ROOT)} marks {text.count(marker)} blocks as {name!r}"
    after = text.split(marker, 1)[1]
    match = re.match(r"```[a-z]*\n(.*?)^```$", after, re.S | re.M)
    assert match, f"the {name!r} marker of {path.relative_to(ROOT)} is not right before a fenced block"
    return match.group(1)


def command_lines(block: str) -> list[str]:
    """The commands of a shell block: one a line, comments (whole lines or after two spaces and `#`) left out."""
    commands = (re.split(r"\s{2,}#", line, maxsplit=1)[0].strip() for line in block.splitlines())
    return [command for command in commands if command and not command.startswith("#")]
