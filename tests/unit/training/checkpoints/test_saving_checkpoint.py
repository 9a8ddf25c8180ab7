"""`saving_checkpoint` on a real file system: a re-save replaces a checkpoint whole or not at all, and what a save
killed mid-way left (the earlier checkpoint set aside, a partial folder in its place) is put right by the next save."""

from __future__ import annotations

from pathlib import Path

import pytest

from maxent_grpo.training.checkpoints.extra_state import saving_checkpoint


def checkpoint(folder: Path, content: str, complete: bool = True) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.safetensors").write_text(content)
    if complete:
        (folder / "trainer_state.json").write_text(content)


def contents(folder: Path) -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(folder.iterdir())}


def test_a_save_killed_mid_way_is_put_right_by_the_next_save_of_that_step(tmp_path: Path) -> None:
    folder, aside = tmp_path / "checkpoint-4", tmp_path / "_replaced-checkpoint-4"
    checkpoint(aside, "run 1")  # the complete checkpoint the killed save was replacing
    checkpoint(folder, "run 2", complete=False)  # the killed save's partial folder
    with pytest.raises(KeyboardInterrupt), saving_checkpoint(str(folder), writes=True, barrier=lambda: None):
        checkpoint(folder, "run 3", complete=False)
        raise KeyboardInterrupt
    assert contents(folder) == {"model.safetensors": "run 1", "trainer_state.json": "run 1"}
    assert not aside.exists()

    with saving_checkpoint(str(folder), writes=True, barrier=lambda: None):
        assert not folder.exists()  # nothing of the earlier checkpoint beside the new files
        checkpoint(folder, "run 3")
    assert contents(folder) == {"model.safetensors": "run 3", "trainer_state.json": "run 3"}
    assert sorted(path.name for path in tmp_path.iterdir()) == ["checkpoint-4"]


def test_a_complete_checkpoint_beside_a_stale_aside_copy_stands(tmp_path: Path) -> None:
    folder, aside = tmp_path / "checkpoint-4", tmp_path / "_replaced-checkpoint-4"
    checkpoint(aside, "run 1")
    checkpoint(folder, "run 2")  # killed after the new checkpoint was complete, before the old copy went
    with pytest.raises(OSError), saving_checkpoint(str(folder), writes=True, barrier=lambda: None):
        raise OSError(28, "No space left on device")
    assert contents(folder) == {"model.safetensors": "run 2", "trainer_state.json": "run 2"}
    assert not aside.exists()


def test_a_process_that_does_not_write_moves_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoint-4"
    checkpoint(folder, "run 1")
    calls = []
    with saving_checkpoint(str(folder), writes=False, barrier=lambda: calls.append("barrier")):
        assert contents(folder)["model.safetensors"] == "run 1"
    assert calls == ["barrier", "barrier"]  # before the save and once every process has written its part
