"""How a `maxent-grpo train` run ends when it cannot train: nothing generated, Ctrl-C, a disk that fills up."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import time

import pytest

from maxent_grpo.tiny_model import build_tiny_model, build_tiny_tokenizer
from tests.e2e.cli_runner import (
    DEMO_RECIPE,
    executable,
    interrupt_after_checkpoint,
    offline_env,
    run_cli,
    terminal_signals,
)

pytestmark = pytest.mark.slow

TRAIN = ["train", "--config", str(DEMO_RECIPE), "--logging_steps", "1"]


def _model_that_only_samples_ids_outside_its_tokenizer(path) -> list[str]:
    """A model whose vocabulary is 8 ids larger than its tokenizer's (as many Hub models pad theirs), made to sample
    only those ids: every completion is invalid, so every group is dropped."""
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer)
    model.resize_token_embeddings(len(tokenizer) + 8)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    suppressed = json.dumps({"suppress_tokens": list(range(len(tokenizer)))})
    return ["--model_name_or_path", str(path), "--generation_kwargs", suppressed, "--generation_max_retries", "0"]


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ("2", "every one of the 2 generation batches of this run was dropped"),  # fewer than the limit of 3
        ("5", "Generation produced no usable prompt group in 3 consecutive batches"),
    ],
    ids=["run-shorter-than-the-limit", "limit-reached"],
)
def test_a_run_whose_every_batch_was_dropped_exits_1(steps, expected, tmp_path):
    model_args = _model_that_only_samples_ids_outside_its_tokenizer(tmp_path / "model")
    result = run_cli([*TRAIN, "--max_steps", steps, *model_args], offline_env(tmp_path), cwd=tmp_path)
    assert result.returncode == 1, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("maxent-grpo train: error: ") and expected in last, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert "Model saved" not in result.stdout


def test_a_streamed_data_set_too_small_for_one_batch_exits_1(tmp_path):
    data = tmp_path / "one_prompt.jsonl"
    data.write_text('{"prompt": "pick a vowel:"}\n')
    args = ["--dataset_name", str(data), "--dataset_streaming", "true", "--max_steps", "1", "--num_generations", "8"]
    result = run_cli([*TRAIN, *args], offline_env(tmp_path), cwd=tmp_path)
    assert result.returncode == 1, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("maxent-grpo train: error: training stopped at step 0 of 1 without a single generation")
    assert "Model saved" not in result.stdout


def test_ctrl_c_names_the_checkpoint_to_resume_from(tmp_path):
    output_dir = tmp_path / "run"
    command = [executable("maxent-grpo"), *TRAIN, "--max_steps", "500", "--output_dir", str(output_dir)]
    command += ["--save_strategy", "steps", "--save_steps", "1"]
    returncode, stderr, _ = interrupt_after_checkpoint(
        command, output_dir / "checkpoint-2", offline_env(tmp_path), tmp_path
    )
    assert returncode == 130, stderr[-3000:]
    checkpoints = sorted(output_dir.glob("checkpoint-*"), key=lambda path: int(path.name.split("-")[1]))
    assert all((path / "trainer_state.json").is_file() for path in checkpoints)  # none left half-written
    assert stderr.strip().splitlines()[-1] == (
        f"maxent-grpo train: interrupted; continue with --resume_from_checkpoint {checkpoints[-1]}"
    )
    assert "Traceback" not in stderr


def _limit_file_size(limit: int):
    def apply() -> None:  # in the child, before exec: writes beyond `limit` bytes fail (EFBIG), like a full disk
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_a_failed_checkpoint_write_is_one_line_and_leaves_no_partial_checkpoint(tmp_path):
    output_dir = tmp_path / "run"
    result = run_cli(
        [*TRAIN, "--max_steps", "4", "--output_dir", str(output_dir), "--save_strategy", "steps", "--save_steps", "2"],
        offline_env(tmp_path),
        cwd=tmp_path,
        preexec_fn=_limit_file_size(64 * 1024),  # the tiny model's weights fit, its optimizer state does not
    )
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith(f"maxent-grpo train: error: cannot save checkpoint {output_dir}/checkpoint-2"), lines
    assert "the partial folder was removed" in lines[-1]
    assert "Traceback" not in result.stderr
    assert not (output_dir / "checkpoint-2").exists()


def test_a_failed_save_over_an_earlier_checkpoint_puts_the_earlier_one_back(tmp_path):
    output_dir = tmp_path / "run"
    command = [*TRAIN, "--max_steps", "4", "--output_dir", str(output_dir), "--save_strategy", "steps"]
    command += ["--save_steps", "2"]
    first = run_cli(command, offline_env(tmp_path), cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    earlier = output_dir / "checkpoint-4"
    files = {path.relative_to(earlier): path.read_bytes() for path in earlier.rglob("*") if path.is_file()}

    # Resumed from checkpoint-2 with another seed (other weights), it saves checkpoint-4 again: the weights fit
    # under the limit, the optimizer state does not.
    resumed = [*command, "--resume_from_checkpoint", str(output_dir / "checkpoint-2"), "--seed", "7"]
    second = run_cli(resumed, offline_env(tmp_path), cwd=tmp_path, preexec_fn=_limit_file_size(64 * 1024))
    assert second.returncode == 2, second.stderr[-3000:]
    after = {path.relative_to(earlier): path.read_bytes() for path in earlier.rglob("*") if path.is_file()}
    assert after.keys() == files.keys()
    assert [name for name in files if after[name] != files[name]] == []  # run 1's checkpoint, nothing of run 2's
    last = second.stderr.strip().splitlines()[-1]
    assert last.startswith(f"maxent-grpo train: error: cannot save checkpoint {earlier}"), last
    assert "the partial folder was removed, the earlier checkpoint put back" in last
    assert sorted(path.name for path in output_dir.iterdir() if "checkpoint" in path.name) == [
        "checkpoint-2",
        "checkpoint-4",
    ]


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into a read-only folder")
def test_read_only_output_dir_is_refused_before_training(tmp_path):
    output_dir = tmp_path / "read-only"
    output_dir.mkdir()
    output_dir.chmod(0o555)
    result = run_cli([*TRAIN, "--output_dir", str(output_dir)], offline_env(tmp_path), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"maxent-grpo train: error: cannot write to output_dir '{output_dir}': Permission denied"
    )


FAILING_REWARDS = """
def unreachable_judge(completions, **kwargs):
    raise ConnectionRefusedError("the judge at 127.0.0.1:9 refused the connection")


def broken_reward(completions, **kwargs):
    return [len(completion) / None for completion in completions]
"""


@pytest.mark.parametrize(
    ("reward", "code", "expected"),
    [
        (
            "unreachable_judge",
            1,
            "reward function unreachable_judge failed on every call in 3 consecutive batches "
            "(reward_max_consecutive_failed_batches=3); last error: ConnectionRefusedError: the judge at 127.0.0.1:9 "
            "refused the connection",
        ),
        (
            "broken_reward",
            2,
            "reward function broken_reward raised TypeError: unsupported operand type(s) for /: 'int' and 'NoneType'",
        ),
    ],
    ids=["scorer-gone", "bug-in-the-function"],
)
def test_a_reward_function_that_keeps_failing_or_is_broken_ends_the_run_with_one_line(
    reward, code, expected, tmp_path
):
    (tmp_path / "my_rewards.py").write_text(FAILING_REWARDS)
    args = ["--max_steps", "5", "--reward_funcs", f"my_rewards.{reward}", "--reward_retries", "1"]
    result = run_cli([*TRAIN, *args], offline_env(tmp_path), cwd=tmp_path)
    assert result.returncode == code, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == f"maxent-grpo train: error: {expected}", result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert "Model saved" not in result.stdout


HANGING_JUDGE = """
import time


def hanging_judge(completions, **kwargs):
    with open("calls.txt", "a") as calls:
        calls.write("call\\n")
    time.sleep(600)
"""


def test_ctrl_c_while_a_hanging_reward_call_is_retried_ends_the_run_at_once(tmp_path):
    # Every attempt hangs past reward_timeout and is retried; Ctrl-C during the retries ends the run as any Ctrl-C
    # does (exit 130, one line), at once: the attempts left running in their threads do not keep the process alive.
    (tmp_path / "my_rewards.py").write_text(HANGING_JUDGE)
    args = ["--max_steps", "5", "--reward_funcs", "my_rewards.hanging_judge", "--reward_timeout", "1"]
    args += ["--reward_retries", "50", "--output_dir", str(tmp_path / "run")]
    process = subprocess.Popen(
        [executable("maxent-grpo"), *TRAIN, *args], cwd=tmp_path, env=offline_env(tmp_path), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, preexec_fn=terminal_signals,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        calls = tmp_path / "calls.txt"
        while not (calls.exists() and len(calls.read_text().splitlines()) >= 2):  # the first retry has started
            assert process.poll() is None and time.monotonic() < deadline, "the reward function was never retried"
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)  # the hanging attempts (600 s each) are not waited for
    finally:
        process.kill()
    assert process.returncode == 130, stderr[-3000:]
    assert stderr.strip().splitlines()[-1].startswith("maxent-grpo train: interrupted"), stderr[-3000:]
    assert "Traceback" not in stderr
