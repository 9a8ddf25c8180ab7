"""`UsageError`: input the command line cannot use. Light on purpose: `maxent-grpo --help` imports only this."""

from __future__ import annotations


class UsageError(Exception):
    """Input that cannot be used (a bad field, file, data set, model or reward name); its message is one sentence."""
