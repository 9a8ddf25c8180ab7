"""`saving_checkpoint` on a real file system: a re-save replaces a checkpoint whole or not at all, and what a save
killed mid-way left (the earlier checkpoint set aside, a partial folder in its place) is put right by the next save."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from maxent_grpo.training.checkpoints.extra_state import saving_checkpoint
from maxent_grpo.training.checkpoints.resume import latest_complete_checkpoint
from maxent_grpo.training.checkpoints.save_errors import SaveError


def checkpoint(folder: Path, content: str, complete: bool = True) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.safetensors").write_text(content)
    if complete:
        (folder / "trainer_state.json").write_text(json.dumps(content))


def contents(folder: Path) -> dict[str, str]:
    """Each file's text; the trainer state's JSON decoded."""
    texts = {path.name: path.read_text() for path in sorted(folder.iterdir())}
    if "trainer_state.json" in texts:
        texts["trainer_state.json"] = json.loads(texts["trainer_state.json"])
    return texts


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


@pytest.mark.parametrize("state", ["", '{"global_step": 4, "log_hi'], ids=["empty", "cut short"])
def test_a_save_interrupted_while_it_writes_the_trainer_state_leaves_no_checkpoint(tmp_path: Path, state: str) -> None:
    """Ctrl-C between the Trainer opening trainer_state.json and writing it (or a full disk part-way) leaves a file
    that exists but is no state: the folder is no checkpoint, so it goes and the earlier one comes back."""
    folder = tmp_path / "checkpoint-4"
    checkpoint(folder, "run 1")
    with pytest.raises(KeyboardInterrupt), saving_checkpoint(str(folder), writes=True, barrier=lambda: None):
        checkpoint(folder, "run 2", complete=False)
        (folder / "trainer_state.json").write_text(state)
        raise KeyboardInterrupt
    assert contents(folder) == {"model.safetensors": "run 1", "trainer_state.json": "run 1"}
    assert sorted(path.name for path in tmp_path.iterdir()) == ["checkpoint-4"]

    fresh = tmp_path / "checkpoint-8"
    removed = pytest.raises(SaveError, match="the partial folder was removed")
    with removed, saving_checkpoint(str(fresh), writes=True, barrier=lambda: None):
        checkpoint(fresh, "run 2", complete=False)
        (fresh / "trainer_state.json").write_text(state)
        raise OSError(28, "No space left on device")
    assert not fresh.exists()


def test_resuming_skips_a_checkpoint_whose_trainer_state_is_cut_short(tmp_path: Path, caplog) -> None:
    checkpoint(tmp_path / "checkpoint-4", "run 1")
    checkpoint(tmp_path / "checkpoint-8", "run 1", complete=False)
    (tmp_path / "checkpoint-8" / "trainer_state.json").write_text("")
    checkpoint(tmp_path / "checkpoint-12", "run 1", complete=False)
    with caplog.at_level(logging.WARNING):
        assert latest_complete_checkpoint(tmp_path) == tmp_path / "checkpoint-4"
    assert "checkpoint-8: its trainer_state.json is empty or cut short (its save did not finish)" in caplog.text
    assert "checkpoint-12: it has no trainer_state.json (its save did not finish)" in caplog.text
