"""Where the disk transport writes when ``vllm_weights_dir`` is not set (`weights.location`): memory for servers
on this machine when it has room and is this user's alone, ``<output_dir>/_vllm-weights`` otherwise."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

from maxent_grpo.training.generation.weights import location as weights_location
from maxent_grpo.training.generation.weights.directory import WeightDirectory
from maxent_grpo.training.generation.weights.location import (
    DEFAULT_WEIGHTS_FOLDER,
    ROOM_FACTOR,
    cgroup_headroom,
    is_loopback,
    is_memory_backed,
    is_private,
    is_tmpfs,
    memory_directory,
    mount_type,
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
        ("http://0.0.0.0:8000", True),  # TRL's default vllm_server_host
        ("http://[::]:8000", True),
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


MOUNTS = """sysfs /sys sysfs rw,nosuid 0 0
tmpfs /dev/shm tmpfs rw,relatime 0 0
/dev/sda1 /mnt/my\\040disk ext4 rw 0 0
/dev/sda2 /run ext4 rw 0 0
tmpfs /run tmpfs rw 0 0
"""


@pytest.mark.parametrize(
    ("path", "kind"),
    [("/dev/shm", "tmpfs"), ("/mnt/my disk", "ext4"), ("/run", "tmpfs"), ("/dev", None), ("/dev/shm/x", None)],
)
def test_the_mount_type_of_a_mount_point(path: str, kind: str | None):
    # /run: mounted twice, the later mount hides the earlier one; /dev/shm/x: inside a mount, not one.
    assert mount_type(Path(path), MOUNTS) == kind


def test_this_machines_mount_table_is_read():
    assert is_tmpfs(Path("/proc")) is False  # a proc file system, listed in every Linux mount table
    assert mount_type(Path("/proc"), Path("/proc/self/mounts").read_text()) == "proc"


@pytest.fixture
def memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory taken for this machine's memory-backed file system (the checks of ownership, mode and room are
    real; only the mount type is taken as given, since mounting a tmpfs needs privileges a test does not have)."""
    root = tmp_path / "shm"
    root.mkdir()
    monkeypatch.setattr(weights_location, "MEMORY_ROOT", root)
    monkeypatch.setattr(weights_location, "is_tmpfs", lambda path: path == root)
    return root


def test_local_servers_read_from_memory_when_it_has_room(tmp_path: Path, memory: Path):
    root = weights_root(None, tmp_path, LOCAL, 10)
    assert root == memory / f"maxent-grpo-weights-{os.getuid()}"
    assert root.stat().st_mode & 0o777 == 0o700 and is_memory_backed(root)
    stats = os.statvfs(memory)
    too_big = stats.f_bavail * stats.f_frsize // ROOM_FACTOR + 1
    assert weights_root(None, tmp_path, LOCAL, too_big) == tmp_path / DEFAULT_WEIGHTS_FOLDER


def test_a_directory_that_is_not_a_tmpfs_is_not_memory(tmp_path: Path):
    assert memory_directory(1, root=tmp_path) is None


def test_a_configured_directory_is_never_removed_as_memory(tmp_path: Path, memory: Path):
    assert not is_memory_backed(tmp_path / "mine")
    assert not is_memory_backed(memory / "maxent-grpo-weights-0000")  # another user's name


def test_a_memory_directory_someone_else_owns_is_not_used(memory: Path, monkeypatch: pytest.MonkeyPatch):
    impostor = os.getuid() + 4242  # the directory this "user" would use is created by us: not theirs alone
    monkeypatch.setattr(weights_location.os, "getuid", lambda: impostor)
    assert memory_directory(1) is None


def test_a_memory_directory_others_may_read_is_not_used(memory: Path):
    mine = memory_directory(1)
    assert mine is not None
    mine.chmod(0o755)
    assert memory_directory(1) is None
    mine.chmod(0o700)
    assert memory_directory(1) == mine


def test_a_private_directory_that_went_away_is_made_again_and_one_someone_else_made_is_refused(
    memory: Path, monkeypatch: pytest.MonkeyPatch
):
    mine = memory_directory(1)
    assert mine is not None
    directory = WeightDirectory(mine, private=True)
    directory.write("1-run", [("w", torch.zeros(2))])
    shutil.rmtree(mine)  # wiped mid-run (a session's IPC removed at logout)
    directory.write("2-run", [("w", torch.ones(2))])
    assert is_private(mine) and (mine / "weights-2-run").is_dir()
    mine.chmod(0o777)  # as a directory another user created in its place would be
    with pytest.raises(PermissionError, match="not this user's alone"):
        directory.write("3-run", [("w", torch.ones(2))])


def test_a_symlink_in_place_of_the_memory_directory_is_not_followed(memory: Path, tmp_path: Path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (memory / f"maxent-grpo-weights-{os.getuid()}").symlink_to(elsewhere)
    assert memory_directory(1) is None


def _cgroup_file(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{text}\n")


def test_the_cgroup_headroom_is_the_least_below_any_limit_on_the_way_up(tmp_path: Path):
    # cgroup v2: the job's cgroup (no limit of its own) inside a slice limited to 10 GB with 7 GB in use.
    membership = tmp_path / "cgroup"
    membership.write_text("0::/slice/job\n")
    root = tmp_path / "fs"
    _cgroup_file(root / "slice" / "job" / "memory.max", "max")
    _cgroup_file(root / "slice" / "job" / "memory.current", str(1 << 30))
    _cgroup_file(root / "slice" / "memory.max", str(10 << 30))
    _cgroup_file(root / "slice" / "memory.current", str(7 << 30))
    assert cgroup_headroom(root, membership) == 3 << 30
    _cgroup_file(root / "slice" / "job" / "memory.max", str(2 << 30))  # a tighter limit below it wins
    assert cgroup_headroom(root, membership) == 1 << 30
    # cgroup v1: the memory controller's hierarchy; its "no limit" is a number near 2**63.
    membership.write_text("5:cpu,cpuacct:/job\n4:memory:/job\n0::/\n")
    _cgroup_file(root / "memory" / "job" / "memory.limit_in_bytes", "9223372036854771712")
    _cgroup_file(root / "memory" / "job" / "memory.usage_in_bytes", str(1 << 30))
    assert cgroup_headroom(root, membership) is None
    _cgroup_file(root / "memory" / "job" / "memory.limit_in_bytes", str(5 << 30))
    assert cgroup_headroom(root, membership) == 4 << 30
    assert cgroup_headroom(root, tmp_path / "no-such-file") is None  # not Linux: nothing known, nothing refused


def test_the_cgroup_headroom_counts_reclaimable_cache_and_finds_the_limit_where_a_container_shows_it(tmp_path: Path):
    membership, root = tmp_path / "cgroup", tmp_path / "fs"
    # A v1 container without a cgroup namespace: /proc shows the host's path, the mount holds its own cgroup.
    membership.write_text("12:memory:/docker/abc\n0::/\n")
    _cgroup_file(root / "memory" / "memory.limit_in_bytes", str(5 << 30))
    _cgroup_file(root / "memory" / "memory.usage_in_bytes", str(4 << 30))
    _cgroup_file(root / "memory" / "memory.stat", f"cache {3 << 30}\ntotal_inactive_file {2 << 30}")
    assert cgroup_headroom(root, membership) == 3 << 30  # 5 GB - (4 GB used - 2 GB of cache it can drop)
    # v2, a leaf whose parent does not hand it the memory controller: the limit above it still counts.
    membership.write_text("0::/slice/job\n")
    (root / "slice" / "job").mkdir(parents=True)
    _cgroup_file(root / "slice" / "memory.max", str(8 << 30))
    _cgroup_file(root / "slice" / "memory.current", str(7 << 30))
    _cgroup_file(root / "slice" / "memory.stat", f"anon {6 << 30}\ninactive_file {1 << 29}")
    assert cgroup_headroom(root, membership) == (1 << 30) + (1 << 29)


def test_a_cgroup_path_that_cannot_be_read_means_nothing_is_known(tmp_path: Path):
    membership = tmp_path / "cgroup"
    membership.write_text(f"4:memory:/{'x' * 300}\n")  # a name past the file system's limit: ENAMETOOLONG
    assert cgroup_headroom(tmp_path / "fs", membership) is None


def test_this_machines_cgroup_is_read():
    headroom = cgroup_headroom()
    assert headroom is None or headroom >= 0


def test_memory_is_not_used_past_the_jobs_memory_limit(tmp_path: Path, memory: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(weights_location, "cgroup_headroom", lambda: 100)  # files in memory count against it
    assert weights_root(None, tmp_path, LOCAL, 34) == tmp_path / DEFAULT_WEIGHTS_FOLDER  # 3 x 34 > 100
    assert weights_root(None, tmp_path, LOCAL, 33) == memory / f"maxent-grpo-weights-{os.getuid()}"
