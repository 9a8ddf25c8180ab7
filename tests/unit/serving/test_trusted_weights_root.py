"""The reload extension loads weights only from under the directory the server trusts (``--weights-root``), and only
files that resolve inside the directory a request names."""

from __future__ import annotations

import pytest

from maxent_grpo.serving.reload_extension import WEIGHTS_ROOT_VARIABLE, check_inside, check_trusted


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


def test_every_file_must_resolve_inside_the_directory_named(tmp_path):
    version, outside = tmp_path / "weights" / "v3", tmp_path / "elsewhere"
    version.mkdir(parents=True)
    outside.mkdir()
    (version / "model.safetensors").write_bytes(b"")
    (outside / "model.safetensors").write_bytes(b"")
    folder = version.resolve()
    assert check_inside([version / "model.safetensors"], folder) == [folder / "model.safetensors"]

    (version / "shard-2.safetensors").symlink_to(outside / "model.safetensors")  # a file link out of the directory
    with pytest.raises(PermissionError, match=r"shard-2.safetensors' leads outside the weights directory"):
        check_inside(sorted(version.glob("*.safetensors")), folder)
    (version / "shard-2.safetensors").unlink()
    (version / "delta-1.safetensors").symlink_to(version / ".." / ".." / "elsewhere" / "model.safetensors")
    with pytest.raises(PermissionError, match="leads outside"):
        check_inside(sorted(version.glob("delta-*.safetensors")), folder)
    inner = version / "inner.safetensors"
    inner.symlink_to(version / "model.safetensors")  # a link that stays inside is taken
    assert check_inside([inner], folder) == [folder / "model.safetensors"]
