"""Where the disk transport writes the weights when ``vllm_weights_dir`` is not set.

With every server on this machine (loopback URLs) the weights go to a memory-backed directory, ``/dev/shm`` (a
``tmpfs`` on Linux), when it has room for `ROOM_FACTOR` times the model, and so has the memory cgroup the process runs
in (a job's or a container's memory limit: files in a ``tmpfs`` count against the limit of whoever wrote them, so
a job close to its limit would be killed instead): the server then reads pages that never touch a disk, and a busy
disk (checkpoints, datasets) cannot stall a push. A server elsewhere reads the weights
over a shared file system, so they go to ``<output_dir>/_vllm-weights`` (`DEFAULT_WEIGHTS_FOLDER`), as do the
weights of a run whose ``/dev/shm`` is missing, too small, or not this user's alone.

Written here because neither TRL nor vLLM picks a directory for a weight transport of this kind.
"""

from __future__ import annotations

import ipaddress
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

#: The disk transport's folder inside ``output_dir`` when the weights do not go to memory. Its leading underscore
#: keeps it out of every Hub upload the Trainer makes (`push_to_hub`, and the pushes of ``hub_strategy``: they ignore
#: ``_*`` and ``checkpoint-*``), which would otherwise send an outdated copy of the model, mid-rewrite.
DEFAULT_WEIGHTS_FOLDER = "_vllm-weights"
#: The memory-backed file system whose subdirectory the weights go to.
MEMORY_ROOT = Path("/dev/shm")
#: Where the kernel shows the cgroup hierarchies (v2 unified, or v1 with a ``memory`` controller folder).
CGROUP_ROOT = Path("/sys/fs/cgroup")
#: Room asked of `MEMORY_ROOT`, in model sizes: the version being written, the one a server may still be loading,
#: and a delta version's whole weights written for a restarted server.
ROOM_FACTOR = 3


def is_loopback(url: str) -> bool:
    """Whether ``url``'s host is this machine, reached through loopback: ``localhost``, 127.0.0.0/8, ``::1``, or the
    unspecified address (``0.0.0.0``, ``::``: TRL's default ``vllm_server_host``, which a client's connection takes
    to this machine)."""
    host = urlsplit(url if "//" in url else f"//{url}").hostname or ""
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified


def memory_directory(needed_bytes: int, *, root: Path | None = None) -> Path | None:
    """This user's directory under the memory-backed ``root`` (default `MEMORY_ROOT`; ``maxent-grpo-weights-<uid>``,
    created with mode 0700), or None when ``root`` is not a ``tmpfs``, has less than ``needed_bytes`` free, this
    process's memory cgroup has less than that left below its limit (`cgroup_headroom`), or the directory exists but
    is not this user's alone (another user could read or replace the weights)."""
    root = MEMORY_ROOT if root is None else root
    if not is_tmpfs(root):
        return None
    try:
        stats = os.statvfs(root)
    except OSError:
        return None
    if stats.f_bavail * stats.f_frsize < needed_bytes:
        return None
    headroom = cgroup_headroom()
    if headroom is not None and headroom < needed_bytes:
        return None
    directory = root / f"maxent-grpo-weights-{os.getuid()}"
    try:
        directory.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return None
    return directory if is_private(directory) else None


#: A cgroup's memory limit file, usage file and the ``memory.stat`` key of its inactive file cache: v2, then v1.
_V2_FILES = ("memory.max", "memory.current", "inactive_file")
_V1_FILES = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")


def cgroup_headroom(cgroup_root: Path = CGROUP_ROOT, membership: Path = Path("/proc/self/cgroup")) -> int | None:
    """Bytes this process's memory cgroup may still be charged: the least, over its cgroup and every ancestor that has
    a memory limit, of the limit minus what the kernel could not reclaim to make room (the usage less the inactive file
    cache; cgroup v2 ``memory.max`` / ``memory.current`` / ``memory.stat``, else v1 ``memory.limit_in_bytes`` /
    ``memory.usage_in_bytes`` / ``memory.stat``). A cgroup path that the mount does not show (a container without a
    cgroup namespace, whose own cgroup is mounted at the root) is read at the mount's root. None when no level has a
    limit, or where the hierarchy cannot be read (not Linux, no memory controller, no permission)."""
    try:
        lines = membership.read_text().splitlines()
        for line in lines:
            hierarchy, controllers, path = [*line.split(":", 2), "", ""][:3]
            if hierarchy == "0" and not controllers:  # v2: one unified hierarchy
                base, files = cgroup_root, _V2_FILES
            elif "memory" in controllers.split(","):  # v1: the memory controller's own hierarchy
                base, files = cgroup_root / "memory", _V1_FILES
            else:
                continue
            folder = base / path.lstrip("/")
            found, least = _least_headroom(base, folder if folder.is_dir() else base, files)
            if found:
                return least
    except OSError:
        return None
    return None


def _least_headroom(base: Path, folder: Path, files: tuple[str, str, str]) -> tuple[bool, int | None]:
    """Whether any level from the cgroup ``folder`` up to the hierarchy's root ``base`` shows its memory usage, and the
    least headroom below a limit on the way (None: no limit)."""
    limit_file, usage_file, inactive_key = files
    found, least = False, None
    while True:
        try:
            usage = int((folder / usage_file).read_text())
            found = True
            limit = (folder / limit_file).read_text().strip()
            if limit != "max" and int(limit) < 1 << 60:  # v1 writes "no limit" as a number near 2**63
                left = max(int(limit) - usage + _stat(folder / "memory.stat", inactive_key), 0)
                least = left if least is None else min(least, left)
        except (OSError, ValueError):  # no memory files at this level (a v2 root, a level without the controller)
            pass
        if folder in (base, folder.parent):
            return found, least
        folder = folder.parent


def _stat(path: Path, key: str) -> int:
    """The value of ``key`` in a cgroup's ``memory.stat`` (0 where it cannot be read)."""
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def is_private(directory: Path) -> bool:
    """Whether ``directory`` is a directory (not a symlink to one) that this user owns and no one else may read,
    write or enter (mode ``0o700`` or narrower)."""
    try:
        info = directory.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077


def weights_root(configured: str | None, output_dir: str | Path, server_urls: Sequence[str], model_bytes: int) -> Path:
    """The disk transport's directory: ``configured`` (``vllm_weights_dir``) when set; else the memory-backed
    `memory_directory` when every one of ``server_urls`` is on loopback and it has room for `ROOM_FACTOR` times
    ``model_bytes``; else ``<output_dir>/_vllm-weights``."""
    if configured:
        return Path(configured)
    if server_urls and all(is_loopback(url) for url in server_urls):
        memory = memory_directory(ROOM_FACTOR * model_bytes)
        if memory is not None:
            return memory
    return Path(output_dir) / DEFAULT_WEIGHTS_FOLDER


def is_memory_backed(root: Path) -> bool:
    """Whether `weights_root` chose ``root`` as this user's memory-backed directory (its versions are removed when
    the run ends)."""
    return root.parent == MEMORY_ROOT and root.name == f"maxent-grpo-weights-{os.getuid()}"


def is_tmpfs(path: Path) -> bool:
    """Whether ``path`` is the mount point of a ``tmpfs`` in ``/proc/self/mounts`` (False where it cannot be read)."""
    try:
        mounts = Path("/proc/self/mounts").read_text()
    except OSError:
        return False
    return mount_type(path, mounts) == "tmpfs"


def mount_type(path: Path, mounts: str) -> str | None:
    """The file system type of the mount point ``path`` in ``mounts`` (the text of ``/proc/self/mounts``: device,
    mount point, type, ... per line; the last mount at that point wins, as it hides the earlier ones), or None when
    ``path`` is not a mount point. Spaces in a mount point are written ``\\040`` there."""
    target = str(path).replace(" ", "\\040")
    found = None
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[1] == target:
            found = fields[2]
    return found
