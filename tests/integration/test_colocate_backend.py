"""VLLMColocateBackend over an engine with vLLM's generate interface that really samples with the tiny model."""

from __future__ import annotations

import math
import re

import pytest
import torch
from datasets import Dataset

from maxent_grpo import MaxEntGRPOTrainer, SamplingSettings, VLLMColocateBackend
from tests.support.tiny_vllm_engine import Logprob, TinyLLM
from tests.support.training import letter_dataset, tiny_config, tiny_model_and_tokenizer

pytestmark = pytest.mark.slow


def test_backend_returns_engine_prompt_ids_counts_and_sampled_logprobs():
    model, tokenizer = tiny_model_and_tokenizer()
    engine = TinyLLM(model, tokenizer)
    backend = VLLMColocateBackend(engine, tokenizer, sampling=SamplingSettings(max_tokens=6))
    chat = [{"role": "user", "content": "hi"}]
    groups = backend.generate(["p1:", "p22:"], [3, 0])
    assert [len(g) for g in groups] == [3, 0]
    assert engine.requests == [3]  # one request per prompt with n = its count, none for a zero count
    for completion in groups[0]:
        assert completion.prompt_ids == tokenizer("p1:")["input_ids"]
        assert 1 <= len(completion.completion_ids) <= 6
        assert completion.logprobs is not None and len(completion.logprobs) == len(completion.completion_ids)
        assert all(lp <= 0 and math.isfinite(lp) for lp in completion.logprobs)
        assert completion.text == tokenizer.decode(completion.completion_ids, skip_special_tokens=True)
    (chat_group,) = backend.generate([chat], [2])
    expected = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=True)
    assert chat_group[0].prompt_ids == list(expected["input_ids"])


class UnscoredLLM(TinyLLM):
    """Of every three completions of a request: the first has no logprobs, the second a NaN one for its first token."""

    def generate(self, prompts: list, sampling_params, use_tqdm: bool = True) -> list:
        results = super().generate(prompts, sampling_params, use_tqdm)
        for request in results:
            for k, output in enumerate(request.outputs):
                if k % 3 == 0:
                    output.logprobs = None
                elif k % 3 == 1:
                    output.logprobs[0] = {output.token_ids[0]: Logprob(math.nan)}
        return results


def test_completions_without_logprobs_are_failed_and_nan_token_logprobs_kept():
    model, tokenizer = tiny_model_and_tokenizer()
    backend = VLLMColocateBackend(UnscoredLLM(model, tokenizer), tokenizer, sampling=SamplingSettings(max_tokens=6))

    (group,) = backend.generate(["p1:"], [6])

    assert len(group) == 6
    for k, completion in enumerate(group):
        assert completion.failed == (k % 3 == 0)
        if completion.failed:
            assert completion.logprobs is None
            continue
        assert completion.logprobs is not None and len(completion.logprobs) == len(completion.completion_ids)
        assert math.isnan(completion.logprobs[0]) == (k % 3 == 1)
        assert all(math.isfinite(value) for value in completion.logprobs[1:])


def test_structured_outputs_regex_constrains_the_completions():
    model, tokenizer = tiny_model_and_tokenizer()
    backend = VLLMColocateBackend(
        TinyLLM(model, tokenizer), tokenizer, sampling=SamplingSettings(max_tokens=6, structured_outputs_regex="[ab]*")
    )

    (group,) = backend.generate(["p1:"], [6])

    assert len(group) == 6
    assert all(re.fullmatch("[ab]*", completion.text) for completion in group), [c.text for c in group]
    assert any(completion.text for completion in group)


def test_training_through_colocate_engine_syncs_weights(tmp_path):
    model, tokenizer = tiny_model_and_tokenizer()
    engine = TinyLLM(model, tokenizer)
    initial = {n: p.clone() for n, p in engine.model.named_parameters()}
    backend = VLLMColocateBackend(engine, tokenizer, sampling=SamplingSettings(max_tokens=8))
    seen = []

    def reward(prompts, completions, answer, **kwargs):
        seen.extend(zip(prompts, answer, strict=True))
        return [float(len(c)) for c in completions]

    trainer = MaxEntGRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=tiny_config(tmp_path, max_steps=3, per_device_train_batch_size=8),
        train_dataset=letter_dataset(8),
        processing_class=tokenizer,
        generation_backend=backend,
    )
    trainer.train()
    assert engine.weight_loads == 3  # once per new global step before generating
    assert all(p == a + ":" for p, a in seen)
    changed = [n for n, p in engine.model.named_parameters() if not torch.equal(p, initial[n])]
    assert changed, "the engine never received the trained weights"
    # After a final sync, the engine holds exactly the trained weights.
    backend.sync_weights(trainer.model)
    for name, param in trainer.model.named_parameters():
        assert torch.equal(dict(engine.model.named_parameters())[name], param.detach())
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert losses and all(math.isfinite(v) for v in losses)


def test_conversational_dataset(tmp_path):
    model, tokenizer = tiny_model_and_tokenizer()
    backend = VLLMColocateBackend(TinyLLM(model, tokenizer), tokenizer, sampling=SamplingSettings(max_tokens=4))
    data = Dataset.from_dict({"prompt": [[{"role": "user", "content": f"q{i}"}] for i in range(4)]})
    completions_seen = []

    def reward(completions, **kwargs):
        completions_seen.extend(completions)
        return [1.0 if c[0]["content"] else 0.0 for c in completions]

    trainer = MaxEntGRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=tiny_config(tmp_path, max_steps=1),
        train_dataset=data,
        processing_class=tokenizer,
        generation_backend=backend,
    )
    trainer.train()
    assert len(completions_seen) == 4
    assert all(c[0]["role"] == "assistant" for c in completions_seen)


class SleepingLLM(TinyLLM):
    """Records the sleep-mode calls a backend makes around generation (vLLM sleeps on GPU platforms only)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[str] = []

    def wake_up(self, tags: list[str]) -> None:
        self.calls.append(f"wake_up({','.join(tags)})")

    def sleep(self, level: int) -> None:
        self.calls.append(f"sleep({level})")

    def generate(self, prompts: list, sampling_params, use_tqdm: bool = True) -> list:
        self.calls.append("generate")
        return super().generate(prompts, sampling_params, use_tqdm)


def test_sleep_mode_wakes_the_cache_and_repushes_discarded_weights_around_every_call():
    model, tokenizer = tiny_model_and_tokenizer()
    engine = SleepingLLM(model, tokenizer)
    backend = VLLMColocateBackend(
        engine,
        tokenizer,
        sampling=SamplingSettings(max_tokens=4),
        sleep_mode=True,
        weight_sync=lambda: engine.calls.append("sync"),
    )
    backend.sync_weights(model)  # the trainer's sync at the start of a step: the engine slept (level 2) since built
    first = backend.generate(["p1:"], [2])
    backend.generate(["p1:", "p2:"], [0, 0])  # nothing to generate here: the same calls, so gathers stay symmetric
    retry = backend.generate(["p1:"], [1])

    assert [len(first[0]), len(retry[0])] == [2, 1]
    cycle = ["wake_up(kv_cache)", "generate", "sleep(2)"]
    assert engine.calls == [
        "sync",
        *cycle,
        "sync",
        "wake_up(kv_cache)",
        "sleep(2)",
        "sync",
        *cycle,
    ]


def test_sleep_mode_needs_a_weight_sync():
    model, tokenizer = tiny_model_and_tokenizer()
    with pytest.raises(ValueError, match="sleep_mode needs weight_sync"):
        VLLMColocateBackend(
            SleepingLLM(model, tokenizer), tokenizer, sampling=SamplingSettings(max_tokens=4), sleep_mode=True
        )


def test_a_user_seed_gives_retries_and_split_groups_distinct_completions():
    # With generation_kwargs={"seed": s}, vLLM samples completion k of a request from seed s + k: sent as is, a retry
    # for a group's deficit repeats its first completions, and the two processes' halves of a group are the same.
    model, tokenizer = tiny_model_and_tokenizer()
    engine = TinyLLM(model, tokenizer)

    def backend(process_index: int) -> VLLMColocateBackend:
        sampling = SamplingSettings(max_tokens=6, generation_kwargs={"seed": 3}, process_index=process_index)
        return VLLMColocateBackend(engine, tokenizer, sampling=sampling)

    first = backend(0)
    (group,) = first.generate(["p1:"], [4])
    (retried,) = first.generate(["p1:"], [2])
    (other_half,) = backend(1).generate(["p1:"], [4])
    ids = [tuple(completion.completion_ids) for completion in [*group, *retried, *other_half]]
    assert len(set(ids)) == len(ids) == 10
    (again,) = backend(0).generate(["p1:"], [4])  # the same seed, process and call: the same completions
    assert [c.completion_ids for c in again] == [c.completion_ids for c in group]
