"""`maxent-grpo bench` hands its arguments to `maxent_grpo.bench.main`, imported only when the command runs."""

from __future__ import annotations

import sys
import types

import pytest

from maxent_grpo.cli import main


def test_bench_forwards_its_arguments(monkeypatch):
    received: list[list[str]] = []
    harness = types.ModuleType("maxent_grpo.bench")
    harness.main = lambda argv: received.append(argv) or 7
    monkeypatch.setitem(sys.modules, "maxent_grpo.bench", harness)
    assert main(["bench", "--arms", "grpo", "listwise", "--steps", "3"]) == 7
    assert received == [["--arms", "grpo", "listwise", "--steps", "3"]]


def test_bench_without_the_harness_is_bad_input(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "maxent_grpo.bench", None)  # makes the import fail as if it were absent
    assert main(["bench"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "maxent_grpo.bench" in err


@pytest.mark.parametrize("library", ["scipy", "matplotlib"])
def test_bench_without_its_extra_says_which_library_and_how_to_install_it(library, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, library, None)  # as if it were not installed
    assert main(["bench", "--seeds", "2"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    hint = "pip install 'maxent-grpo[bench]'"
    assert line == f"maxent-grpo bench: error: the benchmark needs {library}, not installed here: {hint}."
