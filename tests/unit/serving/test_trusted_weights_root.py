"""The reload extension loads weights only from under the directory the server trusts (``--weights-root``)."""

from __future__ import annotations

import pytest

from maxent_grpo.serving.reload_extension import WEIGHTS_ROOT_VARIABLE, check_trusted


def test_a_path_outside_the_root_is_refused_symbolic_links_resolved(tmp_path, monkeypatch):
    root, outside = tmp_path / "shared" / "weights", tmp_path / "elsewhere"
    (root / "run-1" / "v3").mkdir(parents=True)
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    monkeypatch.setenv(WEIGHTS_ROOT_VARIABLE, str(root))

    assert check_trusted(str(root / "run-1" / "v3")) == (root / "run-1" / "v3").resolve()
    assert check_trusted(str(root)) == root.resolve()
    for refused in (outside, root / "escape", root / ".." / "weights-other", tmp_path / "shared" / "weightsX", "/etc"):
        with pytest.raises(PermissionError, match="outside the directory this server trusts"):
            check_trusted(str(refused))


def test_without_a_root_any_path_is_taken(tmp_path, monkeypatch):
    monkeypatch.delenv(WEIGHTS_ROOT_VARIABLE, raising=False)
    assert check_trusted(str(tmp_path)) == tmp_path.resolve()
