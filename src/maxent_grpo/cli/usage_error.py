"""`UsageError`: input the command line cannot use. Light on purpose: `maxent-grpo --help` imports only this."""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

#: The console script's name, at the start of every line the command prints about its input.
PROG = "maxent-grpo"


class UsageError(Exception):
    """Input that cannot be used (a bad field, file, data set, model or reward name); its message is one sentence."""


class UsageErrorParser(argparse.ArgumentParser):
    """argparse, but a bad argument raises `UsageError` (one line) instead of printing usage and exiting, and a value
    that is not one of an option's choices is answered with the closest one ("did you mean"), as the config's own
    enum fields are (`maxent_grpo.enum_fields`)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        # argparse's own check, with the closest choice added to its message.
        if action.choices is not None and value not in action.choices:
            from maxent_grpo.enum_fields import did_you_mean

            choices = list(action.choices)
            listed = ", ".join(repr(choice) for choice in choices)
            hint = did_you_mean(value, choices)
            raise argparse.ArgumentError(action, f"invalid choice: {value!r} (choose from {listed}){hint}")
        super()._check_value(action, value)
