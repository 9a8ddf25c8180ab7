"""Import a callable named by a dotted path, as TRL's scripts resolve reward functions and this package mode keys,
or by a file and a name in it (``path/to/file.py:function``, the ``module:attr`` form uvicorn takes)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType


def import_callable(path: str, kind: str) -> Callable[..., object]:
    """Import ``package.module:attr``, ``package.module.attr`` or ``path/to/file.py:attr`` (``attr`` may itself be
    dotted).

    Args:
        path: the dotted path, or a Python file and a name in it.
        kind: what the callable is for ("mode key", "reward function"), named in error messages.

    Raises:
        ValueError: a path of the wrong form (a file without ``:name`` among them), a module or file that cannot be
            found or fails while it is imported (the message names the file and line), a missing attribute or a
            target that is not callable; the message says which.
    """
    module_name, sep, attr_path = path.partition(":")
    if not sep and path.endswith(".py"):
        raise ValueError(
            f"{kind} {path!r} names a file, not a function in it: write {path + ':function_name'!r} (the file, a "
            "colon, the function's name)"
        )
    if not sep:
        module_name, _, attr_path = path.rpartition(".")
    if not module_name or not attr_path:
        raise ValueError(
            f"{path!r} is not a dotted path 'package.module:function' or 'package.module.function', nor "
            "'path/to/file.py:function'"
        )
    try:
        from_file = module_name.endswith(".py")
        target: object = _from_file(module_name) if from_file else importlib.import_module(module_name)
    except FileNotFoundError as error:
        raise ValueError(f"no file {module_name!r} for {kind} {path!r}") from error
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


def _from_file(file: str) -> ModuleType:
    """The module of the Python file ``file``, run as the module named after it (registered under that name unless
    a module of that name is imported already)."""
    location = Path(file).resolve()
    if not location.is_file():
        raise FileNotFoundError(file)
    spec = importlib.util.spec_from_file_location(location.stem, location)
    assert spec is not None and spec.loader is not None  # a .py file always has a source loader
    module = importlib.util.module_from_spec(spec)
    if spec.name not in sys.modules:  # what it defines can be pickled by name, as an imported module's can
        sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _where(error: Exception) -> str:
    """``file:line`` of a syntax error, or of the innermost frame the error was raised in."""
    if isinstance(error, SyntaxError):
        return f"{error.filename}:{error.lineno}"
    frame = traceback.extract_tb(error.__traceback__)[-1]
    return f"{frame.filename}:{frame.lineno}"
