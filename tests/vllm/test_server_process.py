"""Server mode against a real `vllm` server process on 127.0.0.1: training, and the faults only a real server shows."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

from maxent_grpo import MaxEntGRPOTrainer, VLLMServerBackend
from tests.support.chat import chat_dataset
from tests.support.training import letter_dataset, tiny_config
from tests.support.vllm_server import VLLMServerProcess, running_vllm_server


@pytest.fixture(scope="module")
def server_url(vllm_model_dir):
    with running_vllm_server(vllm_model_dir) as url:
        yield url


def model_and_tokenizer(model_dir):
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return model, AutoTokenizer.from_pretrained(model_dir)


def server_backend(url, tokenizer, **overrides):
    return VLLMServerBackend(url, tokenizer=tokenizer, **{"max_tokens": 8, "request_timeout": 30.0, **overrides})


class AlignedTextReward:
    """Distinct characters of the completion; fails on a row whose prompt is not its answer's."""

    __name__ = "aligned_text"

    def __init__(self) -> None:
        self.rows_seen = 0

    def __call__(self, prompts, completions, answer, **kwargs):
        for prompt, answer_tag in zip(prompts, answer, strict=True):
            assert prompt == answer_tag + ":", f"misaligned row: prompt={prompt!r} answer={answer_tag!r}"
        self.rows_seen += len(prompts)
        return [float(len(set(completion))) for completion in completions]


def chat_reward(prompts, completions, **kwargs):
    """Distinct characters of the assistant message; checks the conversational shapes TRL hands to rewards."""
    for prompt, completion in zip(prompts, completions, strict=True):
        assert prompt[-1]["role"] == "user" and prompt[-1]["content"].startswith("p"), prompt
        assert [message["role"] for message in completion] == ["assistant"], completion
    return [float(len(set(completion[0]["content"]))) for completion in completions]


class StepLogs(TrainerCallback):
    def __init__(self) -> None:
        self.by_step: dict[int, dict[str, float]] = {}

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is not None and "generation/dropped_prompts" in logs:
            self.by_step[state.global_step] = dict(logs)


def test_server_reports_the_prompt_ids_it_used_and_the_sampled_logprobs(server_url, vllm_model_dir):
    model, tokenizer = model_and_tokenizer(vllm_model_dir)
    chat = [{"role": "user", "content": "p1:"}]
    backend = server_backend(server_url, tokenizer)
    groups = [backend.generate(["p0:"], [2])[0], backend.generate([chat], [3])[0]]

    assert [len(group) for group in groups] == [2, 3]
    expected_prompts = [
        tokenizer("p0:")["input_ids"],
        tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"],
    ]
    for group, prompt_ids in zip(groups, expected_prompts, strict=True):
        for completion in group:
            assert completion.prompt_ids == prompt_ids
            ids = completion.prompt_ids + completion.completion_ids
            with torch.no_grad():
                logits = model(torch.tensor([ids])).logits[0, len(prompt_ids) - 1 : -1]
            expected = logits.log_softmax(-1).gather(1, torch.tensor(completion.completion_ids)[:, None])[:, 0]
            assert (torch.tensor(completion.logprobs) - expected).abs().max() < 1e-3


@pytest.mark.parametrize("prompts", ["text", "chat"])
def test_training_through_the_real_server(prompts, server_url, vllm_model_dir, tmp_path):
    model, tokenizer = model_and_tokenizer(vllm_model_dir)
    backend = server_backend(server_url, tokenizer)
    text_reward = AlignedTextReward()
    logs = StepLogs()
    trainer = MaxEntGRPOTrainer(
        model=model,
        reward_funcs=text_reward if prompts == "text" else chat_reward,
        args=tiny_config(tmp_path, max_steps=3, per_device_train_batch_size=8),
        train_dataset=letter_dataset(16) if prompts == "text" else chat_dataset(16),
        processing_class=tokenizer,
        generation_backend=backend,
        callbacks=[logs],
    )
    trainer.train()

    assert trainer.state.global_step == 3
    assert [logs.by_step[step]["generation/dropped_prompts"] for step in (1, 2, 3)] == [0, 0, 0]
    assert backend.stats["requests"] >= 6 and backend.stats["infrastructure_failures"] == 0
    if prompts == "text":
        assert text_reward.rows_seen == 3 * 8


class KillAndRestart(TrainerCallback):
    """Kills the server (SIGKILL) after step 2 and starts a new one on the same port; waits for it after step 4."""

    def __init__(self, server: VLLMServerProcess, model_dir) -> None:
        self.server = server
        self.model_dir = model_dir
        self.restarted: VLLMServerProcess | None = None

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 2:
            self.server.kill()
            self.restarted = VLLMServerProcess(self.model_dir, port=self.server.port).start()
        if state.global_step == 4:
            assert self.restarted is not None
            self.restarted.wait_ready()


def test_server_killed_mid_run_and_restarted(vllm_model_dir, tmp_path):
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
