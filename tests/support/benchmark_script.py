"""Import a script of `benchmarks/` (not a package) as a module, to test its functions and `main`; a digest of the
committed results, to see that a run left them alone."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
RESULTS = BENCHMARKS / "results"


def load_benchmark(name: str) -> ModuleType:
    """The module of ``benchmarks/<name>.py``, freshly executed."""
    spec = importlib.util.spec_from_file_location(f"{name}_benchmark", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass of the script looks its module up while it is executed
    spec.loader.exec_module(module)
    return module


def results_digest() -> str:
    """One hash over every committed result file under ``benchmarks/results`` (paths and contents)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in RESULTS.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(RESULTS)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()
