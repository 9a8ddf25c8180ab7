"""Colocate mode on the real vLLM engine, built by TRL's own engine construction: weights stay in sync."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForCausalLM

from maxent_grpo import MaxEntGRPOTrainer, SamplingSettings, VLLMColocateBackend
from maxent_grpo.training.generation.backends.colocate_engine import ReloadWeightSync
from tests.support.training import TrainingLogs, letter_dataset, tiny_config

STEPS = 4


def distinct_characters(prompts, completions, answer, **kwargs):
    """Rewards distinct characters; fails on a row whose prompt is not its answer's ("p<i>:" for "p<i>")."""
    for prompt, answer_tag in zip(prompts, answer, strict=True):
        assert prompt == answer_tag + ":", f"misaligned row: prompt={prompt!r} answer={answer_tag!r}"
    return [float(len(set(completion))) for completion in completions]


def colocate_config(output_dir, **overrides):
    fields = {
        "max_steps": STEPS,
        "per_device_train_batch_size": 8,
        "learning_rate": 5e-2,
        "bf16": False,  # training computes in float32, and so does the engine (vllm_dtype="training")
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_gpu_memory_utilization": 0.3,
        "vllm_max_model_length": 128,
        **overrides,
    }
    return tiny_config(output_dir, **fields)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, vllm_model_dir):
    """A trainer that trained STEPS steps through the colocated engine, and its logs."""
    recorder = TrainingLogs()
    trainer = MaxEntGRPOTrainer(
        model=str(vllm_model_dir),
        reward_funcs=distinct_characters,
        args=colocate_config(tmp_path_factory.mktemp("colocate")),
        train_dataset=letter_dataset(16),
        callbacks=[recorder],
    )
    trainer.train()
    return trainer, recorder.logs


def test_engine_runs_in_the_training_dtype(trained):
    trainer, _ = trained
    assert trainer.vllm_generation.llm.llm_engine.model_config.dtype == torch.float32
    assert isinstance(trainer.generation_backend, VLLMColocateBackend)


def test_engine_samples_from_the_current_weights_at_every_step(trained):
    _, logs = trained
    differences = [log["sampling/sampling_logp_difference/mean"] for log in logs]
    print(f"colocate sampling_logp_difference/mean per step: {differences}")
    assert len(differences) == STEPS, logs
    assert all(difference < 1e-3 for difference in differences), differences
    assert all(log["generation/dropped_prompts"] == 0 for log in logs)


def _continuation_logprobs(model, ids: list[int], prompt_length: int) -> torch.Tensor:
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, prompt_length - 1 : -1].float()
    return logits.log_softmax(-1).gather(1, torch.tensor(ids[prompt_length:])[:, None])[:, 0]


def test_engine_logprobs_of_a_fixed_continuation_match_the_trained_model(trained, vllm_model_dir):
    from vllm import SamplingParams

    trainer, _ = trained
    trainer.generation_backend.sync_weights(trainer.model)  # what the next step would do first
    tokenizer = trainer.processing_class
    prompt = tokenizer("p3:")["input_ids"]
    ids = prompt + tokenizer("abcabc")["input_ids"]
    output = trainer.vllm_generation.llm.generate(
        [{"prompt_token_ids": ids}], SamplingParams(max_tokens=1, prompt_logprobs=0), use_tqdm=False
    )[0]
    engine = torch.tensor([output.prompt_logprobs[i][ids[i]].logprob for i in range(len(prompt), len(ids))])

    trained_model = trainer.accelerator.unwrap_model(trainer.model).eval()
    initial_model = AutoModelForCausalLM.from_pretrained(vllm_model_dir, dtype=torch.float32).eval()
    expected = _continuation_logprobs(trained_model, ids, len(prompt))
    initial = _continuation_logprobs(initial_model, ids, len(prompt))
    assert (engine - expected).abs().max() < 1e-4, (engine, expected)
    assert (initial - expected).abs().max() > 1e-2, "training should have moved the model for this check to mean much"


@pytest.mark.parametrize(
    ("left_out", "reported"),
    [
        ("model.layers.1.mlp.down_proj.weight", "'model.layers.1.mlp.down_proj.weight'"),
        ("model.layers.0.self_attn.k_proj.weight", "'model.layers.0.self_attn.qkv_proj (98816 of 131584 values)'"),
        ("model.layers.1.mlp.up_proj.weight", "'model.layers.1.mlp.gate_up_proj (131072 of 262144 values)'"),
        ("model.layers.0.self_attn.q_proj.bias", "'model.layers.0.self_attn.qkv_proj (131328 of 131584 values)'"),
    ],
)
def test_weights_the_reload_misses_stop_training(trained, left_out, reported):
    """A parameter the engine gets nothing for, or a fused one it gets only part of (one of q/k/v), raises."""
    trainer, _ = trained
    generation = trainer.vllm_generation
    partial = SimpleNamespace(
        llm=generation.llm,
        _iter_named_params=lambda: ((n, p) for n, p in generation._iter_named_params() if n != left_out),
    )
    try:
        with pytest.raises(RuntimeError, match=re.escape(f"only part of them, for [{reported}]")):
            ReloadWeightSync(partial)()
    finally:
        trainer.generation_backend.sync_weights(trainer.model)


def test_prompts_the_engine_would_reject_drop_only_their_groups(trained):
    trainer, _ = trained
    backend = trainer.generation_backend
    groups = backend.generate(["p1:", "p" * 200, "", "p2:"], [2, 2, 2, 2])  # "" encodes to no token at all
    assert [len(group) for group in groups] == [2, 0, 0, 2]
    assert all(completion.logprobs is not None for group in groups for completion in group)


def test_structured_outputs_regex_constrains_the_real_engine(trained):
    trainer, _ = trained
    backend = VLLMColocateBackend(
        trainer.vllm_generation.llm,
        trainer.processing_class,
        sampling=SamplingSettings(max_tokens=6, structured_outputs_regex="[ab]{3}"),
    )
    groups = backend.generate(["p1:", "p2:"], [3, 3])
    texts = [completion.text for group in groups for completion in group]
    assert len(texts) == 6
    assert all(re.fullmatch("[ab]{3}", text) for text in texts), texts


def test_sleep_mode_is_refused_where_vllm_cannot_sleep(tmp_path, vllm_model_dir):
    with pytest.raises(ValueError, match=r"vllm_enable_sleep_mode=True is not possible here.*cpu"):
        MaxEntGRPOTrainer(
            model=str(vllm_model_dir),
            reward_funcs=distinct_characters,
            args=colocate_config(tmp_path, vllm_enable_sleep_mode=True),
            train_dataset=letter_dataset(4),
        )
