"""Versions of the training weights as safetensors directories that a vLLM server reloads from (the disk transport).

`WeightDirectory.write` streams named tensors into ``<root>/weights-<version>/model-<k>.safetensors`` shards of at
most `SHARD_BYTES` each, inside a hidden ``.incomplete-weights-<version>`` directory that is renamed into place once
every shard is on disk, so a server never sees a half-written version (a rename is atomic on one file system, local or
shared).
A version is named ``<count>-<run>``. Older versions of the same run are removed afterwards: the latest complete one
is all a restarted server needs. A run holds an exclusive lock (``flock``) on ``.run-<run>.lock`` in the directory
while it writes there, so versions of a run that still holds its lock are left alone (two runs pointed at one
directory, by mistake or on a shared mount, never delete what the other's server still has to load), and those of
runs that have ended (a resumed run is a new run) are removed with their lock files, half-written ones included.
"""

from __future__ import annotations

import fcntl
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import IO

import torch

#: Most bytes per safetensors shard (a shard is held in memory while it is written).
SHARD_BYTES = 1 << 30
_VERSION_PREFIX = "weights-"
_INCOMPLETE_PREFIX = f".incomplete-{_VERSION_PREFIX}"
_LOCK_PREFIX, _LOCK_SUFFIX = ".run-", ".lock"


class WeightDirectory:
    """The versions under ``root`` (created when missing). Version names, ``<count>-<run>``, must be valid directory
    names."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).absolute()
        self._held: dict[str, IO[bytes]] = {}  # run -> its lock file, open (and locked) while this object lives

    def path(self, version: str) -> Path:
        """Where ``version`` lives once written."""
        return self.root / f"{_VERSION_PREFIX}{version}"

    def write(self, version: str, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> Path:
        """Write ``named_tensors`` (checkpoint names, each once) as ``version``; remove the other versions of its run
        and every version of runs that have ended.

        Tensors are copied to the CPU one at a time (a ZeRO-3 or FSDP walk frees each gathered tensor as it moves on).
        Returns the version's directory. Raises ValueError when no tensor was given, and what writing raised (a full
        disk: OSError) with nothing of this version left behind; the versions already there stay.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        run = _run_of(version)
        self._hold(run)
        staging = self.root / f"{_INCOMPLETE_PREFIX}{version}"
        staging.mkdir()
        try:
            self._write_shards(staging, version, named_tensors)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        target = self.path(version)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
        self._remove_older(target, run)
        return target

    def _write_shards(self, staging: Path, version: str, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        from safetensors.torch import save_file

        shard: dict[str, torch.Tensor] = {}
        shard_bytes = 0
        shards = 0
        for name, tensor in named_tensors:
            copy = tensor.detach().to("cpu", copy=True).contiguous()
            if shard and shard_bytes + copy.nbytes > SHARD_BYTES:
                shards += 1
                save_file(shard, str(staging / f"model-{shards:05d}.safetensors"))
                shard, shard_bytes = {}, 0
            shard[name] = copy
            shard_bytes += copy.nbytes
        if not shard and not shards:
            raise ValueError(f"no tensors to write as weight version {version!r}")
        if shard:
            shards += 1
            save_file(shard, str(staging / f"model-{shards:05d}.safetensors"))

    def _remove_older(self, current: Path, run: str) -> None:
        ended: dict[str, bool] = {run: False}
        for entry in self.root.iterdir():
            for prefix in (_VERSION_PREFIX, _INCOMPLETE_PREFIX):
                if entry == current or not entry.name.startswith(prefix):
                    continue
                owner = _run_of(entry.name[len(prefix) :])
                if owner == run or ended.setdefault(owner, self._ended(owner)):
                    shutil.rmtree(entry, ignore_errors=True)
        for owner, gone in ended.items():
            if gone:
                (self.root / f"{_LOCK_PREFIX}{owner}{_LOCK_SUFFIX}").unlink(missing_ok=True)

    def _hold(self, run: str) -> None:
        """Take ``run``'s lock (once): the mark that the run is alive."""
        if run not in self._held:
            handle = open(self.root / f"{_LOCK_PREFIX}{run}{_LOCK_SUFFIX}", "ab")  # noqa: SIM115 (held open)
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self._held[run] = handle

    def _ended(self, run: str) -> bool:
        """Whether ``run`` has ended: its lock is free (or it never took one)."""
        try:
            with open(self.root / f"{_LOCK_PREFIX}{run}{_LOCK_SUFFIX}", "rb") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except FileNotFoundError:
            return True
        except BlockingIOError:
            return False
        return True


def _run_of(version: str) -> str:
    """The run a version name ``<count>-<run>`` belongs to (the whole name when it does not start with a count)."""
    count, dash, run = version.partition("-")
    return run if dash and count.isdigit() and run else version
