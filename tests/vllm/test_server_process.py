"""Server mode against a real `vllm` server process on 127.0.0.1 (the session's, `server_url`, serving the model's own
weights): the prompt ids and sampled log-probs it reports, and training through it on text and chat prompts.

The trainers here push no weights (a backend without ``weights_directory``): the server samples from the launch
weights, which is what the log-prob check compares against.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

from maxent_grpo import MaxEntGRPOTrainer, SamplingSettings, VLLMServerBackend
from tests.support.chat import chat_dataset
from tests.support.training import AlignedTextReward, letter_dataset, tiny_config


def model_and_tokenizer(model_dir):
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return model, AutoTokenizer.from_pretrained(model_dir)


def server_backend(url, tokenizer, **overrides):
    sampling = SamplingSettings(max_tokens=8)
    return VLLMServerBackend(url, tokenizer=tokenizer, sampling=sampling, **{"request_timeout": 30.0, **overrides})


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
