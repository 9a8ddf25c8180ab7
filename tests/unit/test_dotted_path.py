"""Callables named by a file and a name in it (`dotted_path.import_callable`), as ``--reward_funcs`` takes them."""

from __future__ import annotations

import pytest

from maxent_grpo.dotted_path import import_callable

SOURCE = "def score(completions, **kwargs):\n    return [1.0] * len(completions)\n"


def test_a_function_of_a_file_anywhere_is_imported_from_that_file(tmp_path, monkeypatch):
    folder = tmp_path / "not a package"
    folder.mkdir()
    (folder / "scoring_file_xyz.py").write_text(
        "def score(completions, **kwargs):\n    return [1.0] * len(completions)\n"
    )
    score = import_callable(f"{folder}/scoring_file_xyz.py:score", "reward function")
    assert score(["a", "b"]) == [1.0, 1.0] and score.__module__ == "scoring_file_xyz"
    monkeypatch.chdir(folder)  # a relative path, from the working directory
    assert import_callable("./scoring_file_xyz.py:score", "reward function")(["a"]) == [1.0]


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("./rewards.py", "reward function './rewards.py' names a file, not a function in it: write './rewards.py:fu"),
        ("./no_such_file_xyz.py:score", "no file './no_such_file_xyz.py' for reward function"),
    ],
)
def test_a_bare_file_or_a_missing_one_is_one_line_saying_what_to_write(path, message):
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(".", r"\.")):
        import_callable(path, "reward function")
