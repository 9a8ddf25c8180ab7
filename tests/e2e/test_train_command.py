"""`maxent-grpo train` on the demo recipe: checkpoint, resume, and two CPU processes under `accelerate launch`."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.e2e.cli_runner import DEMO_RECIPE, MULTI_CPU_CONFIG, executable, offline_env, run, run_cli

pytestmark = pytest.mark.slow

QUICK = ["--save_strategy", "steps", "--save_steps", "2", "--logging_steps", "1", "--disable_tqdm", "true"]


def _state(checkpoint) -> dict:
    return json.loads((checkpoint / "trainer_state.json").read_text())


def test_train_saves_a_checkpoint_and_resumes_from_it_to_max_steps(tmp_path):
    output_dir = tmp_path / "run"
    env = offline_env(tmp_path)
    common = ["train", "--config", str(DEMO_RECIPE), "--output_dir", str(output_dir), *QUICK]

    first = run_cli([*common, "--max_steps", "2"], env)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-4000:]
    checkpoint = output_dir / "checkpoint-2"
    assert _state(checkpoint)["global_step"] == 2
    assert (checkpoint / "maxent_controllers.json").is_file()  # listwise controller state travels with it
    assert (output_dir / "model.safetensors").is_file()  # the final model

    second = run_cli([*common, "--max_steps", "4", "--resume_from_checkpoint", str(checkpoint)], env)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-4000:]
    state = _state(output_dir / "checkpoint-4")
    assert state["global_step"] == 4
    # Steps 1-2 come from the checkpoint's history, 3-4 were trained after resuming.
    assert [entry["step"] for entry in state["log_history"] if "loss" in entry] == [1, 2, 3, 4]


def test_resume_names_a_corrupt_checkpoint_file_and_warns_when_the_controller_state_is_missing(tmp_path):
    output_dir = tmp_path / "run"
    env = offline_env(tmp_path)
    common = ["train", "--config", str(DEMO_RECIPE), "--output_dir", str(output_dir), *QUICK]
    first = run_cli([*common, "--max_steps", "2"], env)
    assert first.returncode == 0, first.stderr[-4000:]
    corrupt = shutil.copytree(output_dir / "checkpoint-2", tmp_path / "corrupt" / "checkpoint-2")
    (corrupt / "optimizer.pt").write_bytes(b"\0" * 100)
    refused = run_cli([*common, "--max_steps", "4", "--resume_from_checkpoint", str(corrupt)], env)
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        f"maxent-grpo train: error: cannot resume from {str(corrupt)!r}: its optimizer.pt is corrupt (not a "
        "torch.save archive)"
    )

    (output_dir / "checkpoint-2" / "maxent_controllers.json").unlink()
    resumed = run_cli([*common, "--max_steps", "3", "--resume_from_checkpoint", str(output_dir / "checkpoint-2")], env)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert (
        f"Checkpoint {output_dir / 'checkpoint-2'} holds no maxent_controllers.json with this state: resuming with "
        "the tau controller (tau back to maxent_tau=0.3) and the beta controller (beta back to 0.0) reset."
    ) in resumed.stderr
    assert _state(output_dir / "checkpoint-3")["global_step"] == 3


def _cut_short(checkpoint, step: int):
    """A copy of ``checkpoint`` as checkpoint-<step>, as a save interrupted before trainer_state.json leaves it."""
    partial = checkpoint.parent / f"checkpoint-{step}"
    shutil.copytree(checkpoint, partial)
    (partial / "trainer_state.json").unlink()
    return partial


def test_resume_from_the_output_dir_or_true_takes_the_latest_complete_checkpoint(tmp_path):
    output_dir = tmp_path / "run"
    env = offline_env(tmp_path)
    common = ["train", "--config", str(DEMO_RECIPE), "--output_dir", str(output_dir), *QUICK]
    first = run_cli([*common, "--max_steps", "2"], env)
    assert first.returncode == 0, first.stderr[-4000:]

    for resume, partial_step, max_steps in ((str(output_dir), 3, 4), ("true", 5, 6)):
        partial = _cut_short(output_dir / f"checkpoint-{max_steps - 2}", partial_step)
        resumed = run_cli([*common, "--max_steps", str(max_steps), "--resume_from_checkpoint", resume], env)
        assert resumed.returncode == 0, resumed.stderr[-4000:]
        assert f"Skipping {partial}: it has no trainer_state.json (its save did not finish); resuming from " in (
            resumed.stderr
        )
        assert "missing keys" not in resumed.stderr  # the tied lm_head.weight is not reported as lost
        state = _state(output_dir / f"checkpoint-{max_steps}")
        # Resumed from checkpoint-<max_steps - 2>: its two steps of history, then two new ones.
        assert [entry["step"] for entry in state["log_history"] if "loss" in entry] == list(range(1, max_steps + 1))


@pytest.mark.distributed
def test_accelerate_launch_runs_two_gloo_processes_on_cpu(tmp_path):
    output_dir = tmp_path / "run"
    command = [
        executable("accelerate"), "launch", "--config_file", str(MULTI_CPU_CONFIG), "--main_process_port", "0",
        "-m", "maxent_grpo.cli",
        "train", "--config", str(DEMO_RECIPE), "--output_dir", str(output_dir), "--max_steps", "2", *QUICK,
    ]  # fmt: skip
    result = run(command, offline_env(tmp_path, OMP_NUM_THREADS="1"), timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-6000:]
    checkpoint = output_dir / "checkpoint-2"
    assert _state(checkpoint)["global_step"] == 2
    # The trainer saves one RNG state per process when there is more than one.
    assert sorted(p.name for p in checkpoint.glob("rng_state_*.pth")) == ["rng_state_0.pth", "rng_state_1.pth"]
