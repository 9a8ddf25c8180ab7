"""Versions of the training weights as safetensors directories that a vLLM server reloads from (the disk transport).

`WeightDirectory.write` streams named tensors into ``<root>/weights-<version>/`` (`tensor_files.ShardWriter`: each
tensor written as the walk yields it, shards of at most `SHARD_BYTES`) inside a hidden
``.incomplete-weights-<version>`` directory that is renamed into place once every shard is on disk, so a server never
sees a half-written version (a rename is atomic on one file system, local or shared). A version holds either the
whole weights (``model-<k>.safetensors``) or, with ``delta=True`` and a version written before, only what changed
since that one (``delta-<k>.safetensors``, `weight_delta`; a delta in which every tensor changed whole is written as
the whole weights). `WeightDirectory.full_path` writes a delta version's whole weights beside it on demand, for a
server that does not hold its base (a restart). `WeightDirectory.write_behind` runs a write on a thread of its own
(`wait_written` waits for it and raises what it raised), so that it overlaps training.

A version is named ``<count>-<run>``. `WeightDirectory.keep_only` removes the other versions of the run (the latest
complete one is all a restarted server needs; the caller says when no push of an older one can still be in flight)
and every version of runs that have ended. A run holds an exclusive lock (``flock``) on ``.run-<run>.lock`` in the
directory while it writes there, so versions of a run that still holds its lock are left alone (two runs pointed at
one directory, by mistake or on a shared mount, never delete what the other's server still has to load), and those of
runs that have ended (a resumed run is a new run) are removed with their lock files, half-written ones included.
With ``remove_at_exit`` (a memory-backed directory, which would otherwise hold them in memory until the next run
there) the versions of its runs are removed too when the `WeightDirectory` is garbage collected or the process exits.
"""

from __future__ import annotations

import fcntl
import logging
import shutil
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO

import torch

from maxent_grpo.serving.weight_delta import (
    BASE_KEY,
    FORMAT,
    FORMAT_KEY,
    VERSION_KEY,
    DeltaSource,
    DeltaStats,
)
from maxent_grpo.training.generation.weights.location import is_private
from maxent_grpo.training.generation.weights.tensor_files import HEADER_RESERVE, ShardWriter

logger = logging.getLogger(__name__)

#: Most bytes per safetensors shard.
SHARD_BYTES = 1 << 30
#: File name prefixes of a version's whole weights and of a delta.
FULL_PREFIX, DELTA_PREFIX = "model", "delta"
#: The folder inside a delta version that holds its whole weights once `WeightDirectory.full_path` wrote them.
FULL_FOLDER = "full"
_VERSION_PREFIX = "weights-"
_INCOMPLETE_PREFIX = f".incomplete-{_VERSION_PREFIX}"
_LOCK_PREFIX, _LOCK_SUFFIX = ".run-", ".lock"
#: Named tensors in the order they are written.
NamedTensors = list[tuple[str, torch.Tensor]]


class WeightDirectory:
    """The versions under ``root`` (created when missing). Version names, ``<count>-<run>``, must be valid directory
    names.

    Args:
        root: the directory.
        delta: write each version after the first as a delta against the one before (`weight_delta`). The process
            then keeps a host copy of the last version written (`delta_bytes`).
        remove_at_exit: remove this object's versions when it is garbage collected or the process exits (by default
            the run's latest version stays until a later run writes into the directory).
        private: ``root`` sits where other users may create files (``/dev/shm``): before each write it is created
            with mode 0700 when missing and checked to be this user's alone (`weights.location.is_private`), else
            the write raises PermissionError (a directory someone else made could be read or swapped under the
            server).
    """

    def __init__(
        self, root: str | Path, *, delta: bool = False, remove_at_exit: bool = False, private: bool = False
    ) -> None:
        self.root = Path(root).absolute()
        self.private = private
        self.delta = DeltaSource() if delta else None
        self._held: dict[str, IO[bytes]] = {}  # run -> its lock file, open (and locked) while this object lives
        self._lock = threading.Lock()  # the delta's host copy: written by `write`, read by `full_path`
        self._reserve = HEADER_RESERVE
        self._behind: _BehindWrite | None = None
        if remove_at_exit:
            weakref.finalize(self, _remove_runs, self.root, self._held)

    def path(self, version: str) -> Path:
        """Where ``version`` lives once written."""
        return self.root / f"{_VERSION_PREFIX}{version}"

    @property
    def delta_bytes(self) -> int:
        """Bytes of the host copy a delta directory keeps (0 without ``delta``)."""
        return 0 if self.delta is None else self.delta.nbytes

    def is_delta(self, version: str) -> bool:
        """Whether ``version`` was written as a delta."""
        return any(self.path(version).glob(f"{DELTA_PREFIX}-*.safetensors"))

    def write(self, version: str, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> Path:
        """Write ``named_tensors`` (checkpoint names, each once) as ``version``; the versions already there stay
        (`keep_only` removes them).

        Each tensor is written as it is yielded (a ZeRO-3 or FSDP walk frees each gathered tensor as it moves on).
        Returns the version's directory. Raises ValueError when no tensor was given, and what writing raised (a full
        disk: OSError) with nothing of this version left behind; a delta directory then writes its next version
        whole.
        """
        self.root.mkdir(mode=0o700 if self.private else 0o777, parents=True, exist_ok=True)
        if self.private and not is_private(self.root):
            raise PermissionError(f"{self.root} is not this user's alone (owner, mode 0700, not a symlink)")
        run = _run_of(version)
        self._hold(run)
        staging = self.root / f"{_INCOMPLETE_PREFIX}{version}"
        staging.mkdir()
        target = self.path(version)
        try:
            with self._lock:
                self._write_version(staging, version, named_tensors)
            shutil.rmtree(target, ignore_errors=True)
            staging.rename(target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            if self.delta is not None:  # the host copy may hold this version, which is not on disk: next one whole
                with self._lock:
                    self.delta.version = None
            raise
        return target

    def write_behind(self, version: str, named_tensors: NamedTensors) -> None:
        """Start `write` of ``named_tensors`` as ``version`` on a thread of its own and return at once: the tensors
        must not change until `wait_written` has returned. A write still running behind is waited for first (and
        what it raised, raised)."""
        self.wait_written()
        self._behind = _BehindWrite(self.write, version, named_tensors)

    def keep_only_once_written(self, version: str) -> None:
        """`keep_only` ``version``: now, or on the thread that writes it behind, once it is written (nothing is
        removed if its write fails)."""
        behind = self._behind
        if behind is None or behind.version != version or not behind.then(lambda: self.keep_only(version)):
            self.keep_only(version)

    def wait_written(self, version: str | None = None, timeout: float | None = None) -> float | None:
        """Wait until the last `write_behind` has ended, if it writes ``version`` (any version, when None); callable
        from any thread. Returns the seconds it took; 0.0 when no such write was started; None when it still runs
        after ``timeout`` seconds. Raises what the write raised, each time it is asked."""
        behind = self._behind
        if behind is None or (version is not None and behind.version != version):
            return 0.0
        return behind.wait(timeout)

    def _write_version(self, staging: Path, version: str, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        delta = self.delta
        if delta is None:
            self._write_files(staging, FULL_PREFIX, named_tensors)
            return
        base, delta.version = delta.version, None  # no base while the host copy is being brought up to date
        if base is None:  # the first version (or one after a failed write): whole, and the host copy taken
            delta.values.clear()
            self._write_files(staging, FULL_PREFIX, delta.entries(named_tensors))
        else:
            metadata = {FORMAT_KEY: FORMAT, BASE_KEY: base, VERSION_KEY: version}
            self._write_files(staging, DELTA_PREFIX, delta.entries(named_tensors), metadata, allow_empty=True)
            stats = delta.stats
            if delta.whole_needed:  # not the base's tensors (names, shapes or dtypes): the host copy, whole
                for shard in staging.glob(f"{DELTA_PREFIX}-*.safetensors"):
                    shard.unlink()
                self._write_files(staging, FULL_PREFIX, delta.values.items())
                delta.stats = DeltaStats(
                    whole=len(delta.values), delta_bytes=stats.full_bytes, full_bytes=stats.full_bytes
                )
            elif not stats.unchanged and not stats.sparse:  # every tensor changed whole: not smaller, a full version
                for shard in staging.glob(f"{DELTA_PREFIX}-*.safetensors"):
                    shard.rename(shard.with_name(FULL_PREFIX + shard.name[len(DELTA_PREFIX) :]))
        delta.version = version

    def full_path(self, version: str) -> Path:
        """The directory of ``version``'s whole weights: the version itself, or for a delta the whole weights written
        into its `FULL_FOLDER` (now, from the host copy, when not yet there).

        Raises:
            LookupError: ``version`` is a delta that is no longer the last version written (its whole weights are not
                held any more).
        """
        target = self.path(version)
        if not self.is_delta(version):
            return target
        folder = target / FULL_FOLDER
        with self._lock:
            if folder.is_dir():
                return folder
            delta = self.delta
            if delta is None or delta.version != version:
                raise LookupError(f"the whole weights of version {version!r} are not held any more")
            staging = target / f".incomplete-{FULL_FOLDER}"
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir()
            try:
                self._write_files(staging, FULL_PREFIX, delta.values.items())
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            staging.rename(folder)
        return folder

    def _write_files(
        self,
        staging: Path,
        prefix: str,
        named_tensors: Iterable[tuple[str, torch.Tensor]],
        metadata: dict[str, str] | None = None,
        *,
        allow_empty: bool = False,
    ) -> None:
        writer: ShardWriter | None = None
        shards = 0
        try:
            for name, tensor in named_tensors:
                if writer is None or not writer.fits(tensor, SHARD_BYTES):
                    if writer is not None:
                        self._finish(writer)
                    shards += 1
                    shard = staging / f"{prefix}-{shards:05d}.safetensors"
                    writer = ShardWriter(shard, reserve=self._reserve, metadata=metadata)
                writer.add(name, tensor)
            if writer is None:
                if not allow_empty:
                    raise ValueError(f"no tensors to write into {staging.name}")
                writer = ShardWriter(staging / f"{prefix}-00001.safetensors", reserve=self._reserve, metadata=metadata)
            self._finish(writer)
        except BaseException:
            if writer is not None:
                writer.abandon()
            raise

    def _finish(self, writer: ShardWriter) -> None:
        length = writer.finish()
        if length > self._reserve:  # the next file reserves what this one needed
            self._reserve = length

    def keep_only(self, version: str) -> None:
        """Remove every other version of ``version``'s run, and every version of runs that have ended; ``version``
        itself stays, also while it is still being written (`write_behind`). Best effort: what cannot be removed (the
        directory gone, another user's lock file) is left, with one log line."""
        try:
            self._remove_all_but(version)
        except OSError as error:
            logger.warning("could not remove the older weight versions in %s: %s", self.root, error)

    def _remove_all_but(self, version: str) -> None:
        if not self.root.is_dir():  # nothing written there yet (or the directory is gone): nothing to remove
            return
        current, run = (self.path(version), self.root / f"{_INCOMPLETE_PREFIX}{version}"), _run_of(version)
        ended: dict[str, bool] = {run: False}
        for entry in self.root.iterdir():
            for prefix in (_VERSION_PREFIX, _INCOMPLETE_PREFIX):
                if entry in current or not entry.name.startswith(prefix):
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
        except OSError:  # the lock is held (BlockingIOError), or this user may not open it (another user's): alive
            return False
        return True


class _BehindWrite:
    """One `WeightDirectory.write` of ``version`` running on a thread of its own (a daemon: a process that exits
    mid-write leaves its staging directory, which the next run there removes)."""

    def __init__(self, write: Callable[[str, NamedTensors], Path], version: str, named_tensors: NamedTensors) -> None:
        self.version = version
        self.seconds = 0.0
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._done = False
        self._then: Callable[[], None] | None = None
        self._thread = threading.Thread(
            target=self._run, args=(write, named_tensors), name="maxent-grpo-weight-write", daemon=True
        )
        self._thread.start()

    def _run(self, write: Callable[[str, NamedTensors], Path], named_tensors: NamedTensors) -> None:
        began = time.perf_counter()
        try:
            write(self.version, named_tensors)
        except BaseException as error:  # raised where it is waited for
            self.error = error
        finally:
            self.seconds = time.perf_counter() - began
            with self._lock:
                self._done, then = True, self._then
        if then is not None and self.error is None:
            then()

    def then(self, action: Callable[[], None]) -> bool:
        """Run ``action`` on this thread once the write has succeeded; False when it has already ended."""
        with self._lock:
            if self._done:
                return False
            self._then = action
            return True

    def wait(self, timeout: float | None) -> float | None:
        self._thread.join(timeout)
        if self._thread.is_alive():
            return None
        if self.error is not None:
            raise self.error
        return self.seconds


def _remove_runs(root: Path, held: dict[str, IO[bytes]]) -> None:
    """Remove the versions of the runs in ``held`` and their lock files (the directory is no longer written)."""
    for run, handle in list(held.items()):
        for entry in root.glob(f"*{_VERSION_PREFIX}*-{run}"):
            shutil.rmtree(entry, ignore_errors=True)
        (root / f"{_LOCK_PREFIX}{run}{_LOCK_SUFFIX}").unlink(missing_ok=True)
        handle.close()
    held.clear()


def _run_of(version: str) -> str:
    """The run a version name ``<count>-<run>`` belongs to (the whole name when it does not start with a count)."""
    count, dash, run = version.partition("-")
    return run if dash and count.isdigit() and run else version
