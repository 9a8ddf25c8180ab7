"""Import a callable named by a dotted path, as TRL's scripts resolve reward functions and this package mode keys."""

from __future__ import annotations

import importlib
import traceback
from collections.abc import Callable


def import_callable(path: str, kind: str) -> Callable[..., object]:
    """Import ``package.module:attr`` or ``package.module.attr`` (``attr`` may itself be dotted).

    Args:
        path: the dotted path.
        kind: what the callable is for ("mode key", "reward function"), named in error messages.

    Raises:
        ValueError: a path of the wrong form, a module that cannot be found or fails while it is imported (the
            message names the file and line), a missing attribute or a target that is not callable; the message says
            which.
    """
    module_name, sep, attr_path = path.partition(":")
    if not sep:
        module_name, _, attr_path = path.rpartition(".")
    if not module_name or not attr_path:
        raise ValueError(f"{path!r} is not a dotted path 'package.module:function' or 'package.module.function'")
    try:
        target: object = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"cannot import module {module_name!r} for {kind} {path!r}: {error}") from error
    except Exception as error:  # the module's own code fails while it is imported: say what and where
        raise ValueError(
            f"cannot import module {module_name!r} for {kind} {path!r}: {type(error).__name__} at "
            f"{_where(error)}: {error}"
        ) from error
    for attr in attr_path.split("."):
        if not hasattr(target, attr):
            raise ValueError(f"module {module_name!r} has no attribute {attr_path!r} ({kind} {path!r})")
        target = getattr(target, attr)
    if not callable(target):
        raise ValueError(f"{kind} {path!r} resolves to a {type(target).__name__}, which is not callable")
    return target


def _where(error: Exception) -> str:
    """``file:line`` of a syntax error, or of the innermost frame the error was raised in."""
    if isinstance(error, SyntaxError):
        return f"{error.filename}:{error.lineno}"
    frame = traceback.extract_tb(error.__traceback__)[-1]
    return f"{frame.filename}:{frame.lineno}"
