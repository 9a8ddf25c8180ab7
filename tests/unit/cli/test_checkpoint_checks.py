"""A checkpoint to resume from with a missing or corrupt file is one UsageError naming the file; one without the
MaxEnt controller state resumes with a warning naming what is reset."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

from maxent_grpo.cli.checkpoint_checks import check_checkpoint
from maxent_grpo.cli.usage_error import UsageError
from maxent_grpo.tiny_model import build_tiny_model, build_tiny_tokenizer
from maxent_grpo.training.checkpoints.extra_state import CONTROLLER_STATE_FILE
from tests.support.training import tiny_config


@pytest.fixture
def checkpoint(tmp_path) -> Path:
    """The files the Trainer writes into checkpoint-<step>, in their own formats."""
    folder = tmp_path / "run" / "checkpoint-1"
    build_tiny_model(build_tiny_tokenizer()).save_pretrained(folder)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 1}))
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
        torch.save({"state": torch.zeros(2)}, folder / name)
    tau_state = {"tau": 0.3, "ema_entropy": 1.0, "step": 1}
    beta_state = {"beta": 0.0, "step": 1}
    (folder / CONTROLLER_STATE_FILE).write_text(json.dumps({"tau": tau_state, "beta": beta_state}))
    return folder


@pytest.mark.parametrize(
    ("break_it", "message"),
    [
        (lambda c: (c / "optimizer.pt").unlink(), "its optimizer.pt is missing"),
        (lambda c: (c / "scheduler.pt").unlink(), "its scheduler.pt is missing"),
        (lambda c: (c / "model.safetensors").unlink(), "it holds no model weights (none of model.safetensors"),
        (lambda c: (c / "optimizer.pt").write_bytes(b"\0" * 32), "its optimizer.pt is corrupt (not a torch.save"),
        (lambda c: (c / "rng_state.pth").write_bytes(b""), "its rng_state.pth is corrupt (not a torch.save archive)"),
        (lambda c: (c / "model.safetensors").write_bytes(b"\0" * 32), "its model.safetensors is corrupt (Error while"),
        (lambda c: (c / "trainer_state.json").write_text("{"), "its trainer_state.json is corrupt (not JSON: "),
        (
            lambda c: (c / CONTROLLER_STATE_FILE).write_bytes(b"\xff"),
            "its maxent_controllers.json is corrupt (not UTF",
        ),
    ],
    ids=[
        "no-optimizer",
        "no-scheduler",
        "no-weights",
        "corrupt-optimizer",
        "empty-rng",
        "corrupt-weights",
        "corrupt-trainer-state",
        "corrupt-controller-state",
    ],
)
def test_a_missing_or_corrupt_file_is_one_line_naming_it(break_it, message, checkpoint, tmp_path):
    break_it(checkpoint)
    with pytest.raises(UsageError) as error:
        check_checkpoint(str(checkpoint), tiny_config(tmp_path))
    assert str(error.value).startswith(f"cannot resume from {str(checkpoint)!r}: ")
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_complete_checkpoint_passes_silently(checkpoint, tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        check_checkpoint(str(checkpoint), tiny_config(tmp_path, maxent_objective="listwise"))
    assert caplog.records == []


def test_a_checkpoint_without_controller_state_warns_what_is_reset(checkpoint, tmp_path, caplog):
    (checkpoint / CONTROLLER_STATE_FILE).unlink()
    config = tiny_config(tmp_path, maxent_objective="listwise", maxent_tau=0.3, dynamic_sampling=True)
    with caplog.at_level(logging.WARNING):
        check_checkpoint(str(checkpoint), config)
    assert [record.getMessage() for record in caplog.records] == [
        f"Checkpoint {checkpoint} holds no {CONTROLLER_STATE_FILE} with this state: resuming with the tau controller "
        "(tau back to maxent_tau=0.3) and the beta controller (beta back to 0.0) and the dynamic sampler reset."
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # stock GRPO keeps no controller state: nothing is reset
        check_checkpoint(str(checkpoint), tiny_config(tmp_path))
    assert caplog.records == []
