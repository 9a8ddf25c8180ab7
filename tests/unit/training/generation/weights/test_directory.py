"""`WeightDirectory` and `ServerWeightSync.write` on a real file system: versions appear whole or not at all, older
ones of the same run go once the newer one is published (another run's stay), a memory-backed directory is emptied
when its run ends, and a write that fails leaves nothing of its version and stops with one line after the whole
walk; a write behind (`write_behind`) runs on its own thread, is spared by `keep_only` and is waited for before a
push."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from maxent_grpo.training.generation.weights.directory import WeightDirectory
from maxent_grpo.training.generation.weights.server_sync import ServerWeightSync, WeightsNotWritten
from tests.support.weight_sync import single_try_sync

TENSORS = {"a.weight": torch.arange(6.0).reshape(2, 3), "b.bias": torch.ones(4)}


def read(version_dir: Path) -> dict[str, torch.Tensor]:
    loaded: dict[str, torch.Tensor] = {}
    for shard in sorted(version_dir.glob("*.safetensors")):
        loaded.update(load_file(shard))
    return loaded


def test_a_version_is_written_whole_and_replaces_the_older_ones_once_kept_alone(tmp_path: Path):
    directory = WeightDirectory(tmp_path / "weights")
    first = directory.write("1-run", TENSORS.items())
    (tmp_path / "weights" / "notes.txt").write_text("not a version")
    second = directory.write("2-run", ((name, 2 * t) for name, t in TENSORS.items()))
    assert first.is_dir()  # a call in flight may still need it: it stays until the caller says otherwise
    directory.keep_only("2-run")

    assert second == directory.path("2-run") and not first.exists()
    assert sorted(p.name for p in (tmp_path / "weights").iterdir()) == [".run-run.lock", "notes.txt", "weights-2-run"]
    loaded = read(second)
    assert loaded.keys() == TENSORS.keys() and all(torch.equal(loaded[n], 2 * t) for n, t in TENSORS.items())


def test_large_weights_are_split_into_shards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr("maxent_grpo.training.generation.weights.directory.SHARD_BYTES", 30)
    version = WeightDirectory(tmp_path).write("1-run", TENSORS.items())
    assert len(list(version.glob("*.safetensors"))) == 2
    assert all(torch.equal(read(version)[n], t) for n, t in TENSORS.items())


def test_a_write_that_fails_midway_leaves_nothing_of_its_version(tmp_path: Path):
    directory = WeightDirectory(tmp_path)
    directory.write("1-run", TENSORS.items())

    def failing() -> Iterator[tuple[str, torch.Tensor]]:
        yield "a.weight", TENSORS["a.weight"]
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        directory.write("2-run", failing())
    assert sorted(p.name for p in tmp_path.iterdir()) == [".run-run.lock", "weights-1-run"]  # the last good stays


def test_what_an_ended_run_left_is_removed_by_the_next_write_and_a_live_runs_versions_stay(tmp_path: Path):
    # A run that has ended (its process exited, its lock with it): a version and a write it never finished.
    script = (
        "import sys, torch\nfrom maxent_grpo.training.generation.weights.directory import WeightDirectory\n"
        "WeightDirectory(sys.argv[1]).write('3-ended', [('w', torch.ones(2))])\n"
    )
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True)
    (tmp_path / ".incomplete-weights-4-ended").mkdir()
    (tmp_path / "weights-1-nolock").mkdir()  # written by a run that never took a lock
    live = WeightDirectory(tmp_path)
    live.write("1-live", TENSORS.items())
    later = WeightDirectory(tmp_path)
    later.write("8-run", TENSORS.items())
    later.keep_only("8-run")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".run-live.lock",
        ".run-run.lock",
        "weights-1-live",
        "weights-8-run",
    ]


def test_a_lock_file_that_cannot_be_opened_counts_as_a_live_run_and_the_rest_is_still_cleaned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    # Another user's run whose lock file this user may not open: a directory in its place raises the same kind of
    # error (IsADirectoryError, an OSError) for any user, root included.
    (tmp_path / ".run-theirs.lock").mkdir()
    (tmp_path / "weights-5-theirs").mkdir()
    directory = WeightDirectory(tmp_path)
    for count in range(1, 4):
        directory.write(f"{count}-mine", TENSORS.items())
        directory.keep_only(f"{count}-mine")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".run-mine.lock",
        ".run-theirs.lock",
        "weights-3-mine",
        "weights-5-theirs",
    ]
    assert "could not remove" not in caplog.text  # nothing was given up on, whatever order the entries came in


def test_a_version_that_cannot_be_renamed_into_place_leaves_nothing_and_the_next_delta_goes_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    directory = WeightDirectory(tmp_path, delta=True)
    directory.write("1-run", TENSORS.items())
    rename = Path.rename

    def refused(self: Path, target: Path) -> Path:  # the file system refuses the version's rename (EXDEV, EIO, ...)
        if self.name.startswith(".incomplete-weights-"):
            raise OSError(5, "Input/output error")
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", refused)
    with pytest.raises(OSError, match="Input/output"):
        directory.write("2-run", ((name, t + 1) for name, t in TENSORS.items()))
    monkeypatch.setattr(Path, "rename", rename)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".run-run.lock", "weights-1-run"]
    third = directory.write("3-run", ((name, t + 2) for name, t in TENSORS.items()))
    assert not directory.is_delta("3-run")  # no version 2 on disk for a server to hold: whole, not a delta of it
    assert all(torch.equal(read(third)[n], t + 2) for n, t in TENSORS.items())


def test_runs_sharing_a_directory_remove_only_their_own_versions(tmp_path: Path):
    run_a, run_b, run_c = WeightDirectory(tmp_path), WeightDirectory(tmp_path), WeightDirectory(tmp_path)
    run_a.write("1-runa", TENSORS.items())
    run_c.write("1-runc", TENSORS.items())
    (tmp_path / ".incomplete-weights-2-runc").mkdir()  # run c writing its next version right now
    run_b.write("1-runb", TENSORS.items())
    run_b.keep_only("1-runb")
    run_a.write("2-runa", TENSORS.items())
    run_a.keep_only("2-runa")
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == [
        ".incomplete-weights-2-runc",
        "weights-1-runb",
        "weights-1-runc",
        "weights-2-runa",
    ]


def test_a_directory_removed_at_exit_keeps_nothing_of_its_run_once_the_process_ends(tmp_path: Path):
    script = (
        "import sys, torch\nfrom maxent_grpo.training.generation.weights.directory import WeightDirectory\n"
        "d = WeightDirectory(sys.argv[1], remove_at_exit=True)\n"
        "d.write('1-gone', [('w', torch.ones(2))]); d.write('2-gone', [('w', torch.zeros(2))])\n"
    )
    WeightDirectory(tmp_path).write("1-other", TENSORS.items())  # another run's version, whose run is alive
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".run-other.lock", "weights-1-other"]


def test_no_tensors_is_refused(tmp_path: Path):
    with pytest.raises(ValueError, match="no tensors to write"):
        WeightDirectory(tmp_path).write("1-run", [])
    assert [p.name for p in tmp_path.iterdir()] == [".run-run.lock"]  # no version, only the run's mark


def sync_writing_to(root: Path, walked: list[str]) -> ServerWeightSync:
    def source(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in model.named_parameters():
            walked.append(name)
            yield name, tensor

    return single_try_sync("http://127.0.0.1:9", root, source=source, request_timeout=1.0)


def test_a_sync_whose_weights_cannot_be_written_stops_with_one_line_after_walking_them_all(tmp_path: Path):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    blocked = tmp_path / "weights"
    blocked.write_text("a file where the directory should be")
    walked: list[str] = []
    sync = sync_writing_to(blocked, walked)

    with pytest.raises(WeightsNotWritten) as stopped:
        sync.write(model)
    message = str(stopped.value)
    assert message.startswith("could not write weight version '1-") and str(blocked) in message
    assert "\n" not in message
    assert walked == [name for name, _ in model.named_parameters()]  # every gather still happened
    assert sync.version is None  # the server is never asked to serve it


def test_a_staged_version_is_the_trainers_only_once_published(tmp_path: Path):
    model = torch.nn.Linear(2, 2)
    sync = sync_writing_to(tmp_path, [])
    sync.write(model)
    served = sync.version
    assert served is not None
    with torch.no_grad():
        model.weight.add_(1.0)
    sync.stage(model)
    assert sync.version == served  # a call in flight still claims, and may still load, the version before
    assert sorted(p.name for p in tmp_path.glob("weights-*")) == sorted(
        f"weights-{v}" for v in (served, f"2-{served.split('-', 1)[1]}")
    )
    sync.publish()
    assert sync.version is not None and sync.version.startswith("2-")
    assert [p.name for p in tmp_path.glob("weights-*")] == [f"weights-{sync.version}"]
    sync.publish()  # nothing staged: nothing changes
    assert sync.version.startswith("2-")


def test_a_sync_writes_each_version_under_the_run_token(tmp_path: Path):
    model = torch.nn.Linear(2, 2)
    sync = sync_writing_to(tmp_path, [])
    sync.write(model)
    first = sync.version
    with torch.no_grad():
        model.weight.add_(1.0)
    sync.write(model)
    assert first is not None and sync.version is not None
    assert first.split("-", 1)[1] == sync.version.split("-", 1)[1] and sync.version.startswith("2-")
    assert torch.equal(read(WeightDirectory(tmp_path).path(sync.version))["weight"], model.weight.detach())


class HeldTensors(list):
    """Named tensors whose walk, once it has begun (``entered``), waits until ``release`` is set: a write behind that
    is still running."""

    def __init__(self, items, release: threading.Event) -> None:
        super().__init__(items)
        self.entered, self.release = threading.Event(), release

    def __iter__(self):
        self.entered.set()
        assert self.release.wait(30)
        return super().__iter__()


def test_a_write_behind_runs_on_its_own_thread_and_keep_only_spares_it(tmp_path: Path):
    directory = WeightDirectory(tmp_path)
    directory.write("1-run", TENSORS.items())
    release = threading.Event()
    held = HeldTensors(TENSORS.items(), release)
    directory.write_behind("2-run", held)
    assert held.entered.wait(30)  # its staging directory is made: the write is under way
    assert (tmp_path / ".incomplete-weights-2-run").is_dir() and not directory.path("2-run").exists()
    assert directory.wait_written("2-run", timeout=0.05) is None  # still running
    assert directory.wait_written("1-run") == 0.0  # not the version written behind: nothing to wait for
    directory.keep_only("2-run")  # publishing it while it is written removes the version before, not it
    release.set()
    assert directory.wait_written("2-run") > 0.0
    assert sorted(p.name for p in tmp_path.iterdir()) == [".run-run.lock", "weights-2-run"]
    assert all(torch.equal(read(directory.path("2-run"))[name], tensor) for name, tensor in TENSORS.items())
    assert directory.wait_written() > 0.0  # asked again: the same write, done


def test_a_write_behind_that_fails_raises_where_it_is_waited_for_each_time(tmp_path: Path):
    blocked = tmp_path / "weights"
    blocked.write_text("a file where the directory should be")
    directory = WeightDirectory(blocked)
    directory.write_behind("1-run", list(TENSORS.items()))
    for _ in range(2):
        with pytest.raises(OSError):
            directory.wait_written()
    assert WeightDirectory(tmp_path / "other").wait_written() == 0.0  # none started: nothing to wait for


def test_a_version_staged_behind_is_written_from_the_weights_at_staging_and_counted_once_finished(tmp_path: Path):
    model = torch.nn.Linear(2, 2)
    counted: list[tuple[str, float]] = []
    sync = single_try_sync("http://127.0.0.1:9", tmp_path, write_behind=True)
    sync._count = lambda stat, amount=1: counted.append((stat, amount))
    at_staging = model.weight.detach().clone()
    sync.stage(model)
    sync.publish()  # the trainer's version while its files may still be written
    assert sync.version is not None and sync.version.startswith("1-")
    assert counted == []  # its seconds are counted once the write is waited for
    sync.finish_staged()  # before the optimizer changes the weights
    assert [stat for stat, _ in counted] == ["weight_write_seconds"] and sync.write_seconds > 0.0
    with torch.no_grad():
        model.weight.add_(1.0)
    assert torch.equal(read(WeightDirectory(tmp_path).path(sync.version))["weight"], at_staging)
    sync.finish_staged()  # nothing left behind: nothing counted again
    assert len(counted) == 1
    sync.write(model)  # a sync of its own is never written behind
    assert [p.name for p in tmp_path.glob("weights-*")] == [f"weights-{sync.version}"]
    assert torch.equal(read(WeightDirectory(tmp_path).path(sync.version))["weight"], model.weight.detach())


def test_a_version_staged_behind_that_cannot_be_written_stops_once_finished_and_is_never_pushed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    blocked = tmp_path / "weights"
    blocked.write_text("a file where the directory should be")
    sync = single_try_sync("http://127.0.0.1:9", blocked, write_behind=True)
    sync.stage(torch.nn.Linear(2, 2))
    sync.publish()
    assert not sync.ensure()  # the push waits for the files, finds none, and sends nothing
    assert "not pushed to http://127.0.0.1:9" in caplog.text
    with pytest.raises(WeightsNotWritten, match="could not write weight version '1-"):
        sync.finish_staged()


def test_a_walk_that_fails_while_a_write_behind_is_started_stops_once_finished(tmp_path: Path):
    def source(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
        yield "weight", model.weight
        raise OSError("the walk broke")

    sync = single_try_sync("http://127.0.0.1:9", tmp_path, source=source, write_behind=True)
    sync.stage(torch.nn.Linear(2, 2))
    with pytest.raises(WeightsNotWritten, match=r"could not write weight version '1-.*OSError: the walk broke"):
        sync.finish_staged()


def test_a_version_written_behind_and_published_removes_the_ones_before_on_its_own_thread_once_written(
    tmp_path: Path,
):
    model = torch.nn.Linear(2, 2)
    sync = single_try_sync("http://127.0.0.1:9", tmp_path, write_behind=True)
    sync.write(model)
    first = sync.version
    entered, release = threading.Event(), threading.Event()
    write = sync.directory.write

    def held_write(version, named_tensors):  # the write behind, held until released
        entered.set()
        assert release.wait(30)
        return write(version, named_tensors)

    sync.directory.write = held_write
    sync.stage(model)  # a call from the version in use may still be in flight: it stays
    assert entered.wait(30)
    sync.publish()  # the older versions go once the new one is written, not before
    assert (tmp_path / f"weights-{first}").is_dir()
    release.set()
    sync.finish_staged()
    assert [p.name for p in tmp_path.glob("weights-*")] == [f"weights-{sync.version}"]
    assert sync.version != first
