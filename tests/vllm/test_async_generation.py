"""Asynchronous generation against a real `vllm` server on 127.0.0.1 (disk weight transfer).

What is checked on the real server: the next step's batch is generated while this one trains; no trained row's
weights are more than ``max_staleness`` steps old; every trained row's sampler log-probs are those of the weights of
the version it is tagged with (the model as it was when that version was written), not the current ones; a server
killed while a batch is in flight and restarted later; an error while a batch is in flight leaves no thread behind
(two processes: `tests/vllm/test_server_two_processes.py`). The server is the session's (`server_url`,
`shared_server`: see `tests/vllm/conftest.py`), reset to its launch state before each test; the kill test kills it
and restarts it on its port with the same options.
"""

from __future__ import annotations

import copy
import json
import threading
from pathlib import Path

import pytest
import requests
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

from maxent_grpo import MaxEntGRPOTrainer
from tests.e2e.cli_runner import DEMO_RECIPE, executable, interrupt_after_checkpoint, offline_env, run
from tests.support.real_vllm_server import SharedVLLMServer
from tests.support.training import AlignedTextReward, letter_dataset, tiny_config, train_in_thread

THREAD_NAME = "maxent-grpo-async-generation"


class VersionedTrainer(MaxEntGRPOTrainer):
    """Keeps the model's weights as they were when each version was written, and the rows each step trained on."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.snapshots: dict[str, dict[str, torch.Tensor]] = {}
        self.trained: list[dict] = []
        self.sampled: dict[tuple, str | None] = {}
        generate = self.generation_backend.generate

        def recording(prompts, counts):  # called from both threads: a dict update per completion
            groups = generate(prompts, counts)
            for group in groups:
                for c in group:
                    self.sampled[(tuple(c.prompt_ids), tuple(c.completion_ids))] = c.weight_version
            return groups

        self.generation_backend.generate = recording

    def _sync_backend_weights(self) -> None:
        super()._sync_backend_weights()
        version = self.generation_backend.weight_version
        if version not in self.snapshots:
            self.snapshots[version] = copy.deepcopy(self.model.state_dict())

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.model.training:
            self.trained.append(
                {
                    "step": self.state.global_step,
                    "version": self.generation_backend.weight_version,
                    **{
                        key: output[key].detach().clone()
                        for key in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")
                    },
                    "sampling": output["sampling_per_token_logps"].detach().clone(),
                    "keep": output["row_keep"].clone() if "row_keep" in output else None,
                }
            )
        return output


def async_trainer(model_dir, url, output_dir, trainer_class=VersionedTrainer, reward=None, **overrides):
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    config = tiny_config(
        output_dir,
        use_vllm=True,
        vllm_mode="server",
        vllm_server_base_url=url,
        vllm_weights_dir=str(Path(output_dir) / "weights"),
        per_device_train_batch_size=8,
        bf16=False,  # training computes in float32, as the server does
        async_generation=True,
        **overrides,
    )
    return trainer_class(
        model=model,
        reward_funcs=reward or AlignedTextReward(),
        args=config,
        train_dataset=letter_dataset(32),
        processing_class=tokenizer,
    )


def completion_logps(model: torch.nn.Module, batch: dict) -> torch.Tensor:
    """``model``'s log-probability of each completion token of ``batch`` (TRL's padded layout), [B, C]."""
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits.double()
    width = batch["completion_ids"].shape[1]
    logps = logits[:, -width - 1 : -1].log_softmax(-1)
    return logps.gather(2, batch["completion_ids"][..., None])[..., 0]


def staleness_by_step(trainer) -> dict[int, float]:
    return {
        e["step"]: e["generation/staleness_max"] for e in trainer.state.log_history if "generation/staleness_max" in e
    }


def test_async_generation_trains_on_rows_whose_sampler_logprobs_are_their_tagged_weights(
    server_url, vllm_model_dir, tmp_path
):
    trainer = async_trainer(vllm_model_dir, server_url, tmp_path, max_steps=5, learning_rate=5e-2)
    trainer.train()

    staleness = staleness_by_step(trainer)
    print(f"staleness per step {staleness}; backend {trainer.generation_backend.stats}")
    assert trainer.state.global_step == 5
    assert set(staleness) == {1, 2, 3, 4, 5}
    assert all(value <= trainer.args.max_staleness for value in staleness.values())
    assert staleness[1] == 0 and all(
        staleness[step] == 1 for step in (2, 3, 4, 5)
    )  # the first batch has no window before
    assert not any(thread.name == THREAD_NAME and thread.is_alive() for thread in threading.enumerate())

    # A model of its own (a deep copy of the trained one would keep its forward, which accelerate wraps, bound to it).
    probe = AutoModelForCausalLM.from_pretrained(vllm_model_dir, dtype=torch.float32)
    to_tagged, to_current, stale_rows = [], [], 0
    current_weights = {batch["step"]: batch["version"] for batch in trainer.trained}
    for batch in trainer.trained:
        mask = batch["completion_mask"].bool()
        rows = [
            trainer.sampled[
                (
                    tuple(batch["prompt_ids"][i][batch["prompt_mask"][i].bool()].tolist()),
                    tuple(batch["completion_ids"][i][mask[i]].tolist()),
                )
            ]
            for i in range(mask.shape[0])
        ]
        for version in set(rows):
            probe.load_state_dict(trainer.snapshots[version])
            tagged = completion_logps(probe, batch)
            picked = torch.tensor([row == version for row in rows])
            sampler = batch["sampling"].double()
            to_tagged.append(((sampler - tagged).abs() * mask)[picked].max().item())
            if version != current_weights[batch["step"]]:
                stale_rows += int(picked.sum())
                probe.load_state_dict(trainer.snapshots[current_weights[batch["step"]]])
                current = completion_logps(probe, batch)
                to_current.append(((sampler - current).abs() * mask)[picked].max().item())
    print(f"max |sampler - tagged weights| {to_tagged}; max |sampler - trained weights| {to_current}")
    assert stale_rows >= 4 * 8  # steps 2-5 trained on rows generated a step ahead
    assert max(to_tagged) < 1e-3
    assert min(to_current) > 1e-2  # so the tag, not the trained weights, is what sampled them


class KillInFlight:
    """A reward function that kills the server while the next batch is being generated (step ``kill_at``), and a
    callback that restarts it on the same port after step ``restart_after``. `hold` keeps that next batch's call
    ahead from finishing before the kill (a tiny model's call would otherwise often end first)."""

    __name__ = "kill_in_flight"

    def __init__(self, server: SharedVLLMServer, kill_at: int, restart_after: int) -> None:
        self.server = server
        self.kill_at, self.restart_after = kill_at, restart_after
        self.trainer = None
        self.killed = threading.Event()
        self.restarted = False
        self.reward = AlignedTextReward()

    def hold(self, trainer) -> None:
        self.trainer = trainer
        backend = trainer.generation_backend
        generate = backend.generate

        def held(prompts, counts):
            ahead = threading.current_thread().name == THREAD_NAME
            if ahead and trainer.state.global_step + 1 == self.kill_at and not self.killed.is_set():
                assert self.killed.wait(timeout=120), "the server was not killed"
            return generate(prompts, counts)

        backend.generate = held

    def __call__(self, prompts, completions, **kwargs):
        if self.trainer.state.global_step + 1 == self.kill_at and not self.killed.is_set():
            self.server.kill()  # the next batch is being generated in the background
            self.killed.set()
        return self.reward(prompts, completions, **kwargs)

    def callback(self) -> TrainerCallback:
        outer = self

        class Restart(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                if state.global_step == outer.restart_after and not outer.restarted:
                    outer.server.restart()
                    outer.restarted = True

        return Restart()


def test_a_server_killed_while_a_batch_is_in_flight_and_restarted(shared_server, vllm_model_dir, tmp_path):
    killer = KillInFlight(shared_server, kill_at=2, restart_after=3)
    trainer = async_trainer(
        vllm_model_dir,
        shared_server.base_url,
        tmp_path,
        reward=killer,
        max_steps=6,
        vllm_request_attempts=2,
        vllm_request_timeout=10.0,
        generation_max_retries=1,
        generation_max_consecutive_empty_batches=4,
    )
    killer.hold(trainer)
    trainer.add_callback(killer.callback())
    worker, errors = train_in_thread(trainer, timeout=600)
    served = requests.get(f"{shared_server.base_url}/weight_info", timeout=10).json()["weight_version"]

    assert not worker.is_alive(), "training hung after the server was killed with a batch in flight"
    assert not errors, errors
    logs = {e["step"]: e for e in trainer.state.log_history if "generation/dropped_prompts" in e}
    stats = trainer.generation_backend.stats
    print({step: (e["generation/dropped_prompts"], e["generation/staleness_max"]) for step, e in logs.items()}, stats)
    assert trainer.state.global_step == 6
    assert logs[3]["generation/dropped_prompts"] == 2  # the batch in flight at the kill: nothing came back
    assert all(logs[step]["generation/dropped_prompts"] == 0 for step in (5, 6))  # after the restart
    written, token = trainer.generation_backend.weight_version.split("-")
    assert served == f"{int(written) - 1}-{token}"  # the restarted server was given the weights the last batch needed
    assert all(e["generation/staleness_max"] <= 1 for e in logs.values())
    assert killer.reward.rows_seen >= 4 * 8
    assert not any(thread.name == THREAD_NAME and thread.is_alive() for thread in threading.enumerate())


class FailsAtStep:
    __name__ = "fails_at_step"

    def __init__(self, step: int) -> None:
        self.step, self.trainer, self.reward = step, None, AlignedTextReward()

    def __call__(self, prompts, completions, **kwargs):
        if self.trainer.state.global_step == self.step:
            raise RuntimeError("reward server unreachable")
        return self.reward(prompts, completions, **kwargs)


def test_an_error_while_a_batch_is_in_flight_leaves_no_thread_behind(server_url, vllm_model_dir, tmp_path):
    reward = FailsAtStep(2)
    trainer = async_trainer(
        vllm_model_dir, server_url, tmp_path, trainer_class=MaxEntGRPOTrainer, reward=reward, max_steps=4
    )
    reward.trainer = trainer
    with pytest.raises(RuntimeError, match="reward server unreachable"):
        trainer.train()
    assert trainer.state.global_step == 2
    assert not any(thread.name == THREAD_NAME and thread.is_alive() for thread in threading.enumerate())


def test_ctrl_c_with_a_batch_in_flight_exits_130_and_the_run_resumes_from_its_checkpoint(
    server_url, vllm_model_dir, tmp_path
):
    """The CLI, for real: interrupted while the next batch is generated ahead, it exits at once with 130 (the thread
    does not hold the process); resumed, it generates the batch that was in flight again and trains to the end."""
    output_dir = tmp_path / "run"
    train = [
        executable("maxent-grpo"), "train", "--config", str(DEMO_RECIPE), "--model_name_or_path", str(vllm_model_dir),
        "--output_dir", str(output_dir), "--use_vllm", "true", "--vllm_mode", "server", "--vllm_server_base_url",
        server_url, "--vllm_weight_transfer", "disk", "--async_generation", "true", "--bf16", "false",
        "--logging_steps", "1", "--save_strategy", "steps", "--save_steps", "1",
    ]  # fmt: skip
    returncode, stderr, exit_seconds = interrupt_after_checkpoint(
        [*train, "--max_steps", "500"], output_dir / "checkpoint-2", offline_env(tmp_path), tmp_path
    )
    print(f"exited {exit_seconds:.1f} s after Ctrl-C")
    assert returncode == 130, stderr[-3000:]
    assert "Exception in thread" not in stderr and "Traceback" not in stderr, stderr[-3000:]
    assert exit_seconds < 60
    checkpoint = max(output_dir.glob("checkpoint-*"), key=lambda path: int(path.name.split("-")[1]))
    last = int(checkpoint.name.split("-")[1])

    resumed = run([*train, "--max_steps", str(last + 2), "--resume_from_checkpoint", str(checkpoint)],
                  offline_env(tmp_path), timeout=300, cwd=tmp_path)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    state = json.loads((output_dir / f"checkpoint-{last + 2}" / "trainer_state.json").read_text())
    staleness = [e["generation/staleness_max"] for e in state["log_history"] if "generation/staleness_max" in e]
    print(f"staleness before and after the resume: {staleness}")
    # The resumed run's first batch is generated at its own step (nothing survives the interruption), the next ahead.
    assert staleness[-2:] == [0.0, 1.0]


class SignalOnEvenPrompts:
    """Distinct characters for the prompts of even index, 0 for the others (no learning signal: dynamic sampling
    replaces their groups); fails on a misaligned row."""

    __name__ = "signal_on_even_prompts"

    def __init__(self) -> None:
        self.aligned = AlignedTextReward()

    def __call__(self, prompts, completions, answer, **kwargs):
        scores = self.aligned(prompts, completions, answer)
        return [0.0 if int(tag[1:]) % 2 else score for score, tag in zip(scores, answer, strict=True)]


def test_dynamic_sampling_refills_from_the_current_weights_what_was_generated_ahead(
    server_url, vllm_model_dir, tmp_path
):
    trainer = async_trainer(
        vllm_model_dir,
        server_url,
        tmp_path,
        trainer_class=MaxEntGRPOTrainer,
        reward=SignalOnEvenPrompts(),
        max_steps=4,
        dynamic_sampling=True,
        dynamic_sampling_max_rounds=4,
    )
    trainer.train()
    logs = [e for e in trainer.state.log_history if "generation/staleness_max" in e]
    print([(e["dynamic_sampling/rounds"], e["generation/staleness_mean"]) for e in logs])
    assert trainer.state.global_step == 4 and len(logs) == 4
    assert all(e["generation/staleness_max"] <= 1 for e in logs)
    refilled = [e for e in logs[1:] if e["dynamic_sampling/rounds"] > 0]
    assert refilled  # groups without signal were replaced ...
    # ... by groups generated at the step itself: those rows are 0 steps old (the groups generated ahead 1).
    assert all(e["generation/staleness_mean"] < 1 for e in refilled)
