"""Faults only a real `vllm` server process shows: killed and restarted mid-run, never coming up."""

from __future__ import annotations

import threading
import time

import pytest
from transformers import TrainerCallback

from maxent_grpo import MaxEntGRPOTrainer
from tests.support.real_vllm_server import VLLMServerProcess
from tests.support.training import AlignedTextReward, letter_dataset, tiny_config
from tests.vllm.test_server_process import StepLogs, model_and_tokenizer, server_backend


class KillAndRestart(TrainerCallback):
    """Kills the server and its engine (SIGKILL) after step 2; after step 4 starts a new one on the same port and waits
    until it is ready. Steps 3 and 4 find no server."""

    def __init__(self, server: VLLMServerProcess, model_dir) -> None:
        self.server = server
        self.model_dir = model_dir
        self.restarted: VLLMServerProcess | None = None

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 2:
            self.server.kill()
        if state.global_step == 4:
            self.restarted = VLLMServerProcess(self.model_dir, port=self.server.port).start()
            self.restarted.wait_ready()


def test_server_killed_and_restarted_during_training(vllm_model_dir, tmp_path):
    model, tokenizer = model_and_tokenizer(vllm_model_dir)
    server = VLLMServerProcess(vllm_model_dir).start()
    restart = KillAndRestart(server, vllm_model_dir)
    try:
        server.wait_ready()
        backend = server_backend(server.base_url, tokenizer, max_attempts=2, backoff_seconds=0.2, request_timeout=10.0)
        reward = AlignedTextReward()
        logs = StepLogs()
        trainer = MaxEntGRPOTrainer(
            model=model,
            reward_funcs=reward,
            args=tiny_config(
                tmp_path,
                max_steps=8,
                per_device_train_batch_size=8,
                generation_max_retries=1,
                generation_max_consecutive_empty_batches=4,
            ),
            train_dataset=letter_dataset(16),
            processing_class=tokenizer,
            generation_backend=backend,
            callbacks=[logs, restart],
        )
        errors: list[BaseException] = []

        def train() -> None:
            try:
                trainer.train()
            except BaseException as error:  # reported below
                errors.append(error)

        start = time.monotonic()
        worker = threading.Thread(target=train, daemon=True)
        worker.start()
        worker.join(timeout=600)
        wall = time.monotonic() - start
    finally:
        server.close()
        if restart.restarted is not None:
            restart.restarted.close()

    assert not worker.is_alive(), "training hung after the server was killed"
    assert not errors, errors
    dropped = {step: logs.by_step[step]["generation/dropped_prompts"] for step in sorted(logs.by_step)}
    print(f"kill/restart: wall {wall:.1f} s, dropped prompts per step {dropped}, backend stats {backend.stats}")
    assert trainer.state.global_step == 8
    assert dropped[1] == dropped[2] == 0
    assert dropped[3] == dropped[4] == 2  # both prompt groups of each step while the server was down
    assert all(dropped[step] == 0 for step in (5, 6, 7, 8))
    assert backend.stats["retries"] > 0 and backend.stats["infrastructure_failures"] > 0
    assert reward.rows_seen == 6 * 8  # the six steps with data; a fully dropped batch is never scored


def test_server_that_never_comes_up_stops_training_with_a_clear_error(tmp_path, vllm_model_dir):
    not_a_model = tmp_path / "not-a-model"
    not_a_model.mkdir()
    server = VLLMServerProcess(not_a_model).start()  # exits during start-up: there is no model to serve
    model, tokenizer = model_and_tokenizer(vllm_model_dir)
    try:
        backend = server_backend(server.base_url, tokenizer, connection_timeout=5.0)
        trainer = MaxEntGRPOTrainer(
            model=model,
            reward_funcs=AlignedTextReward(),
            args=tiny_config(
                tmp_path / "out", max_steps=4, generation_max_retries=1, generation_max_consecutive_empty_batches=2
            ),
            train_dataset=letter_dataset(8),
            processing_class=tokenizer,
            generation_backend=backend,
        )
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=rf"{server.base_url} has not come up within 5 s"):
            trainer.train()
        assert time.monotonic() - start < 60
    finally:
        server.close()
