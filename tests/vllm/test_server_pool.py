"""Several real `vllm` servers behind one trainer (``vllm_server_base_urls``): failover, resync, on-policy throughout.

Two servers of the shared model on 127.0.0.1: the session's (`shared_server`) and a second one launched beside it
(`second_server`), both taking disk weight reloads. One is killed mid-run and restarted: training goes on on the other
without dropping a group, and the restarted one is given the training weights and its share again. With no server
left, groups are dropped as with one server and the run stops with the usual error.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

from maxent_grpo import MaxEntGRPOTrainer
from maxent_grpo.training.empty_batches import NoUsableGenerationError
from maxent_grpo.training.generation.backends.vllm_server_pool import VLLMServerPool
from tests.support.real_vllm_server import SharedVLLMServer, free_port
from tests.support.server_logprobs import ProbeAfterEachCall
from tests.support.training import AlignedTextReward, letter_dataset, tiny_config, train_in_thread
from tests.vllm.test_server_process import StepLogs

POOL_LOGGER = "maxent_grpo.training.generation.backends.vllm_server_pool"


class KillThenRestart(TrainerCallback):
    """Kills ``server`` (SIGKILL, with its engine) at the end of the first step from step 2 on by which it has answered
    completions (on a loaded machine its first weight reload can outlast the hedge, which keeps it out until its
    canary); one step later, trained without it, restarts it on its port and waits until it is ready and has answered
    one completion (`SharedVLLMServer.start`: a fresh CPU engine's first request takes long enough on a loaded machine
    for the pool to hedge it); `AFTER_RESTART` steps later, ends the run. Keeps the pool's counters at both moments and
    the steps they came at."""

    AFTER_RESTART = 4

    def __init__(self, server: SharedVLLMServer) -> None:
        self.server = server
        self.pool: VLLMServerPool | None = None
        self.at: dict[str, dict[str, int]] = {}
        self.steps: dict[str, int] = {}

    def on_step_end(self, args, state, control, **kwargs):
        assert self.pool is not None
        step = state.global_step
        if "kill" not in self.at and step >= 2 and self.pool.stats["servers/1/completions"] > 0:
            self.server.kill()
            self.at["kill"], self.steps["kill"] = self.pool.stats, step
        elif "kill" in self.at and "restart" not in self.at:
            self.server.restart()
            self.at["restart"], self.steps["restart"] = self.pool.stats, step
        elif "restart" in self.at and step == self.steps["restart"] + self.AFTER_RESTART:
            control.should_training_stop = True


def pool_trainer(model_dir, urls, output_dir, callbacks, **overrides) -> MaxEntGRPOTrainer:
    config = tiny_config(
        output_dir,
        per_device_train_batch_size=16,  # four groups of four per step: two for each server
        bf16=False,  # training computes in float32, as the servers do
        use_vllm=True,
        vllm_mode="server",
        vllm_server_base_urls=urls,
        vllm_weights_dir=str(output_dir / "weights"),
        vllm_request_attempts=2,
        vllm_request_timeout=20.0,
        **overrides,
    )
    return MaxEntGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
        reward_funcs=AlignedTextReward(),
        args=config,
        train_dataset=letter_dataset(32),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        callbacks=callbacks,
    )


def probed_pool(trainer: MaxEntGRPOTrainer, faults: Any) -> tuple[VLLMServerPool, list[ProbeAfterEachCall]]:
    """The trainer's pool, handed to ``faults`` (the test's fault-injecting callback, which reads its counters), and a
    probe of each of its servers' weights after every call (`ProbeAfterEachCall`)."""
    pool = trainer.generation_backend
    assert isinstance(pool, VLLMServerPool)
    faults.pool = pool
    probes = [
        ProbeAfterEachCall(server, trainer.model, trainer.processing_class, server.base_url) for server in pool.servers
    ]
    return pool, probes


def test_a_killed_server_s_share_goes_to_the_other_and_returns_after_its_restart_on_policy(
    shared_server, second_server, vllm_model_dir, tmp_path, caplog
):
    caplog.set_level(logging.INFO, logger=POOL_LOGGER)
    faults, logs = KillThenRestart(second_server), StepLogs()
    urls = [shared_server.base_url, second_server.base_url]
    # One retry round: the two groups the dead server lost are asked again once; sent to both servers again, one of
    # them would be lost.
    trainer = pool_trainer(vllm_model_dir, urls, tmp_path, [faults, logs], max_steps=12, generation_max_retries=1)
    pool, probes = probed_pool(trainer, faults)
    worker, errors = train_in_thread(trainer, timeout=900)

    assert not worker.is_alive(), "training hung after a server of the pool was killed"
    assert not errors, errors
    assert set(faults.steps) == {"kill", "restart"}, f"server 1 answered nothing in 12 steps: {pool.stats}"
    end, kill, restart = pool.stats, faults.at["kill"], faults.at["restart"]
    dropped = {step: logs.by_step[step]["generation/dropped_prompts"] for step in sorted(logs.by_step)}
    print(f"pool: dropped per step {dropped}; at the kill {kill}; at the restart {restart}; at the end {end}")
    print(f"|server - trained| per call: server 0 {probes[0].to_current}, server 1 {probes[1].to_current}")
    print(f"killed after step {faults.steps['kill']}, restarted after step {faults.steps['restart']}")
    assert faults.steps["kill"] <= 4  # it had its share before the kill, by step 4 at the latest
    assert trainer.state.global_step == faults.steps["restart"] + KillThenRestart.AFTER_RESTART
    assert set(dropped.values()) == {0}  # no group lost: what server 1 missed was retried on server 0
    assert restart["servers/1/failures"] > kill["servers/1/failures"]  # the step after the kill found it dead
    assert restart["servers/1/completions"] == kill["servers/1/completions"]  # and gave it nothing more
    assert restart["servers/0/completions"] >= kill["servers/0/completions"] + 16  # that step came from server 0
    assert end["servers/1/requests"] > restart["servers/1/requests"]  # it was given work again
    assert end["servers/1/completions"] > restart["servers/1/completions"]  # and answered it
    assert pool.servers[1].stats["weight_pushes"] > 0
    logged = [entry.get("generation/servers/1/failures", 0) for entry in trainer.state.log_history]
    assert sum(logged) == end["servers/1/failures"]  # counted per step in the logs
    lines = [record.getMessage() for record in caplog.records if record.name == POOL_LOGGER]
    assert any(line.startswith("vLLM server 1") and "failed" in line for line in lines)
    assert any(line.startswith("vLLM server 1") and "answers again" in line for line in lines)
    # Every call that brought completions back came from the trained weights: server 0's at least at the steps up to
    # the restart (alone at the last), server 1's at least once before the kill and once after the restart (how many
    # more depends on the rates the pool measures).
    assert len(probes[0].to_current) >= 3 and len(probes[1].to_current) >= 2
    for probe in probes:
        assert max(probe.to_current) < 1e-3
    assert min(probes[1].to_initial[1:]) > 1e-2  # the model moved, and the restarted server with it


class KillAfterFirstStep(TrainerCallback):
    def __init__(self, server: SharedVLLMServer) -> None:
        self.server = server

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 1:
            self.server.kill()


def test_with_no_server_left_groups_are_dropped_and_the_run_stops_with_the_usual_error(
    second_server, vllm_model_dir, tmp_path
):
    # The pool's first server never answers (a port nobody listens on: the trainer is built all the same, against
    # the second); the one that does is killed after step 1.
    urls = [f"http://127.0.0.1:{free_port()}", second_server.base_url]
    trainer = pool_trainer(
        vllm_model_dir,
        urls,
        tmp_path,
        [KillAfterFirstStep(second_server)],
        max_steps=6,
        generation_max_consecutive_empty_batches=2,
    )
    worker, errors = train_in_thread(trainer, timeout=600)

    assert not worker.is_alive(), "training hung with no server of the pool left"
    assert len(errors) == 1 and isinstance(errors[0], NoUsableGenerationError), errors
    print(errors[0])
    assert trainer.state.global_step < 6
    assert "no usable prompt group in 2 consecutive batches" in str(errors[0])
