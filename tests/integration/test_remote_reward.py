"""`examples/remote_reward.py` against its real scoring service, which the test kills, restarts, makes answer 503
and makes hang while the tiny model trains: every step trains, the rows a failed call could not score are counted and
left out of the update, and no row gets a made-up reward (the "Scoring" rule of the design notes, I3 / I6)."""

from __future__ import annotations

import importlib.util
import math
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from transformers import TrainerCallback

from maxent_grpo import MaxEntGRPOTrainer
from tests.support.training import letter_dataset, tiny_config, tiny_model_and_tokenizer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("remote_reward", ROOT / "examples" / "remote_reward.py")
remote_reward = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(remote_reward)

#: What the service does during each training step (global step at the step's start); the rest answer normally.
SCHEDULE = {1: "503", 3: "hang", 5: "killed"}
MAX_STEPS = 8


class Service:
    """The example's scoring service, as a process of its own on 127.0.0.1."""

    def __init__(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        script = str(ROOT / "examples" / "remote_reward.py")
        command = [sys.executable, script, "serve", "--port", str(self.port)]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert self.process.stdout.readline().startswith("scoring service on")
        self.set_mode("ok")

    def set_mode(self, mode: str) -> None:
        requests.post(f"{self.url}/mode", json={"mode": mode}, timeout=5).raise_for_status()

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=10)
        self.process = None


class Faults(TrainerCallback):
    """Puts the service into the state `SCHEDULE` names for each step, and back to normal after it."""

    def __init__(self, service: Service) -> None:
        self.service = service

    def on_step_begin(self, args, state, control, **kwargs):
        fault = SCHEDULE.get(state.global_step)
        if self.service.process is None:
            self.service.start()  # restarted on the same port
        if fault == "killed":
            self.service.kill()
        else:
            self.service.set_mode("ok" if fault is None else fault)


class BatchRecorder(MaxEntGRPOTrainer):
    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        batch = self._batch
        self.recorded.append((list(batch.texts), batch.rewards_per_func[:, 0].tolist(), list(batch.keep)))
        return output


def test_training_against_a_scoring_service_that_fails_every_way(tmp_path):
    service = Service()
    service.start()
    model, tokenizer = tiny_model_and_tokenizer()
    trainer = BatchRecorder(
        model=model,
        reward_funcs=remote_reward.RemoteReward(service.url, request_timeout=0.5),
        args=tiny_config(tmp_path, max_steps=MAX_STEPS, reward_timeout=2.0, reward_retries=1),
        train_dataset=letter_dataset(16),
        processing_class=tokenizer,
        callbacks=[Faults(service)],
    )
    trainer.recorded = []
    try:
        trainer.train()
    finally:
        if service.process is not None:
            service.set_mode("ok")  # the hung answers end
            service.kill()
    assert trainer.state.global_step == MAX_STEPS  # every step trained: the run never stopped
    assert len(trainer.recorded) == MAX_STEPS
    for step, (texts, rewards, keep) in enumerate(trainer.recorded):
        if step in SCHEDULE:  # unscored: out of the update, no reward at all (never a made-up 0)
            assert keep == [False] * 4 and all(math.isnan(r) for r in rewards), (step, rewards)
        else:  # the service's own rewards, each for its own completion
            assert keep == [True] * 4, step
            assert rewards == pytest.approx([remote_reward.score(text) for text in texts]), step
    logs = [entry for entry in trainer.state.log_history if "scoring/unscored_rows" in entry]
    assert [entry["scoring/remote_score/unscored_rows"] for entry in logs] == [
        4.0 if step in SCHEDULE else 0.0 for step in range(MAX_STEPS)
    ]
    assert [entry["scoring/remote_score/retried"] for entry in logs] == [
        1.0 if step in SCHEDULE else 0.0 for step in range(MAX_STEPS)
    ]
    assert logs[3]["scoring/remote_score/timed_out"] == 2.0  # the client's read timeout, on both attempts
    rewards_logged = [entry for entry in trainer.state.log_history if "reward" in entry]
    assert len(rewards_logged) == MAX_STEPS - len(SCHEDULE)  # no reward statistic of a step without scored rows
