"""Deprecation notices that transformers and TRL raise about each other's APIs are not addressed to our users.

TRL 1.16 still calls transformers APIs that transformers 5 renamed (`gradient_checkpointing_enable`, the
`gradient_checkpointing` argument, ...), so every training run prints FutureWarnings about code the user never wrote
and cannot change. They are ignored from the moment `maxent_grpo` is imported, for the command line, the Python API
and the examples alike. A FutureWarning raised on behalf of the user's own call (its location is the user's code), or
by any other package, still shows; so does everything when the interpreter runs with -W options or PYTHONWARNINGS,
which then decide alone.
"""

from __future__ import annotations

import sys
import warnings

#: Modules whose FutureWarnings concern the libraries' own use of each other.
UPSTREAM_MODULES = r"(transformers|trl)(\.|$)"


def ignore_upstream_deprecations() -> None:
    """Ignore FutureWarnings located in transformers or TRL, unless warning options were given."""
    if not sys.warnoptions:
        warnings.filterwarnings("ignore", category=FutureWarning, module=UPSTREAM_MODULES)
