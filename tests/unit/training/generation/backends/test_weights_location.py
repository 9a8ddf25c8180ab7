"""Where the disk transport writes when ``vllm_weights_dir`` is not set (`weights_location`): memory for servers
on this machine when it has room and is this user's alone, ``<output_dir>/_vllm-weights`` otherwise."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from maxent_grpo.training.generation.backends import weights_location
from maxent_grpo.training.generation.backends.weights_location import (
    DEFAULT_WEIGHTS_FOLDER,
    MEMORY_ROOT,
    is_loopback,
    memory_directory,
    weights_root,
)

LOCAL = ["http://127.0.0.1:8000"]


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("http://127.0.0.1:8000", True),
        ("http://127.3.4.5:1", True),
        ("https://localhost:8000/", True),
        ("http://[::1]:8000", True),
        ("127.0.0.1:8000", True),
        ("http://198.18.0.2:8000", False),
        ("http://gen0:8000", False),
        ("http://10.0.0.1", False),
    ],
)
def test_loopback_urls(url: str, loopback: bool):
    assert is_loopback(url) is loopback


def test_a_configured_directory_wins(tmp_path: Path):
    assert weights_root(str(tmp_path / "mine"), tmp_path, LOCAL, 10) == tmp_path / "mine"


def test_a_server_elsewhere_reads_from_the_output_dir(tmp_path: Path):
    urls = ["http://127.0.0.1:8000", "http://gen1:8000"]  # one server not on this machine is enough
    assert weights_root(None, tmp_path, urls, 10) == tmp_path / DEFAULT_WEIGHTS_FOLDER


def test_local_servers_read_from_memory_when_it_has_room(tmp_path: Path):
    if not weights_location._is_tmpfs(MEMORY_ROOT):
        assert weights_root(None, tmp_path, LOCAL, 10) == tmp_path / DEFAULT_WEIGHTS_FOLDER
        return
    root = weights_root(None, tmp_path, LOCAL, 10)
    assert root == MEMORY_ROOT / f"maxent-grpo-weights-{os.getuid()}"
    assert root.stat().st_mode & 0o777 == 0o700
    too_big = 2 * os.statvfs(MEMORY_ROOT).f_blocks * os.statvfs(MEMORY_ROOT).f_frsize
    assert weights_root(None, tmp_path, LOCAL, too_big) == tmp_path / DEFAULT_WEIGHTS_FOLDER


def test_a_directory_that_is_not_a_tmpfs_is_not_memory(tmp_path: Path):
    assert memory_directory(1, root=tmp_path) is None


def test_a_memory_directory_someone_else_owns_is_not_used(monkeypatch: pytest.MonkeyPatch):
    if not weights_location._is_tmpfs(MEMORY_ROOT):
        pytest.skip(f"{MEMORY_ROOT} is not a tmpfs here")
    impostor = os.getuid() + 4242  # the directory this "user" would use is created by us: not theirs alone
    made = MEMORY_ROOT / f"maxent-grpo-weights-{impostor}"
    monkeypatch.setattr(weights_location.os, "getuid", lambda: impostor)
    try:
        assert memory_directory(1) is None
    finally:
        shutil.rmtree(made, ignore_errors=True)


def test_a_memory_directory_others_may_read_is_not_used():
    if not weights_location._is_tmpfs(MEMORY_ROOT):
        pytest.skip(f"{MEMORY_ROOT} is not a tmpfs here")
    mine = memory_directory(1)
    assert mine is not None
    mine.chmod(0o755)
    try:
        assert memory_directory(1) is None
    finally:
        mine.chmod(0o700)
    assert memory_directory(1) == mine
