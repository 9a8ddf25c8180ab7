"""Faults only a real `vllm` server process shows: killed and restarted mid-run, never coming up.

The killed server is the session's (`shared_server`): killed with SIGKILL and restarted on its port with the same
options, the restarted process serves the next tests (each of which finds it reset to its launch state). Its trainer
pushes its weights by disk (`weights_directory`): the restarted server is given the trainer's version before it
generates again, so training stays on-policy through the restart.
"""

from __future__ import annotations

import copy
import time

import pytest
import torch
from transformers import TrainerCallback

from maxent_grpo import MaxEntGRPOTrainer
from tests.support.real_vllm_server import SharedVLLMServer, VLLMServerProcess
from tests.support.server_logprobs import PROBE_TEXT, ProbeAfterEachCall, server_logprobs
from tests.support.training import AlignedTextReward, letter_dataset, tiny_config, train_in_thread
from tests.vllm.test_server_process import StepLogs, model_and_tokenizer, server_backend


class KillAndRestart(TrainerCallback):
    """Kills the server and its engine (SIGKILL) after step 2; after step 4 starts a new one on the same port (with the
    same options) and waits until it is ready. Steps 3 and 4 find no server."""

    def __init__(self, server: SharedVLLMServer) -> None:
        self.server = server

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 2:
            self.server.kill()
        if state.global_step == 4:
            self.server.restart()


def test_server_killed_and_restarted_during_training(shared_server, vllm_model_dir, tmp_path):
    model, tokenizer = model_and_tokenizer(vllm_model_dir)
    restart = KillAndRestart(shared_server)
    backend = server_backend(
        shared_server.base_url,
        tokenizer,
        max_attempts=2,
        backoff_seconds=0.2,
        request_timeout=10.0,
        weights_directory=tmp_path / "weights",
    )
    probe = ProbeAfterEachCall(backend, model, tokenizer, shared_server.base_url)
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
            bf16=False,  # training computes in float32, as the server does
        ),
        train_dataset=letter_dataset(16),
        processing_class=tokenizer,
        generation_backend=backend,
        callbacks=[logs, restart],
    )
    start = time.monotonic()
    worker, errors = train_in_thread(trainer, timeout=600)
    wall = time.monotonic() - start
    training_diffs, training_pushes = list(probe.to_current), backend.stats["weight_pushes"]
    resynced = resync_after_another_push(backend, model, tokenizer, tmp_path)

    assert not worker.is_alive(), "training hung after the server was killed"
    assert not errors, errors
    dropped = {step: logs.by_step[step]["generation/dropped_prompts"] for step in sorted(logs.by_step)}
    print(f"kill/restart: wall {wall:.1f} s, dropped prompts per step {dropped}, backend stats {backend.stats}")
    assert trainer.state.global_step == 8
    assert dropped[1] == dropped[2] == 0
    assert dropped[3] == dropped[4] == 2  # both prompt groups of each step while the server was down
    assert all(dropped[step] == 0 for step in (5, 6, 7, 8))
    assert backend.stats["infrastructure_failures"] > 0  # calls not sent: the version check found no server
    assert reward.rows_seen == 6 * 8  # the six steps with data; a fully dropped batch is never scored
    # Every call that brought completions back, before the kill and after the restart, came from the trained weights.
    print(f"max |server - trained| per call {training_diffs}")
    assert len(training_diffs) >= 6 and max(training_diffs) < 1e-3
    assert min(probe.to_initial[1:]) > 1e-2
    assert training_pushes == 6  # steps 3 and 4 found no server; step 5 pushed into the new one
    assert resynced


def resync_after_another_push(backend, model, tokenizer, tmp_path) -> bool:
    """Another trainer pushes its own weights into the server (shared by mistake); the next call of ``backend``
    must push the trainer's version again before it generates: the server's log-probs of the probe text are then
    those it had before the other push. True when it did."""
    ids = tokenizer(PROBE_TEXT)["input_ids"]
    before = server_logprobs(backend.base_url, ids)  # the trainer's last version
    other_model = copy.deepcopy(model)
    with torch.no_grad():
        for parameter in other_model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    other = server_backend(backend.base_url, tokenizer, weights_directory=tmp_path / "other-weights")
    other.sync_weights(other_model)
    assert other.generate(["p0:"], [1]) != [[]]
    assert (server_logprobs(backend.base_url, ids) - before).abs().max() > 1e-2  # the other weights are served
    pushes = backend.stats["weight_pushes"]
    groups = backend.generate(["p1:"], [2])
    return (
        len(groups[0]) == 2
        and backend.stats["weight_resyncs"] == 1
        and backend.stats["weight_pushes"] == pushes + 1
        and (server_logprobs(backend.base_url, ids) - before).abs().max() < 1e-3
    )


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
