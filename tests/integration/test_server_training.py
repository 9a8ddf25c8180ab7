"""Training through a real local server process that speaks vLLM's OpenAI-compatible protocol, faults switched on."""

from __future__ import annotations

import math
import re
import threading
import time
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file
from transformers import TrainerCallback

from maxent_grpo import Completion, MaxEntGRPOTrainer, SamplingSettings, VLLMServerBackend
from maxent_grpo.training.generation.backends.selection import build_backend
from maxent_grpo.training.generation.weights.directory import WeightDirectory
from tests.support.stand_in_vllm.process import run_test_server, run_test_server_processes
from tests.support.tagged_backend import TaggedBackend
from tests.support.training import AlignedTextReward, letter_dataset, tiny_config, tiny_model_and_tokenizer

pytestmark = pytest.mark.slow


def __call__(self, prompts, completions, completion_ids, answer, **kwargs):
    for prompt, answer_tag in zip(prompts, answer, strict=True):
        if prompt != answer_tag + ":":
            raise AssertionError(f"misaligned row: prompt={prompt!r} answer={answer_tag!r}")
    self.rows_seen += len(prompts)
    return [float(len(set(c))) for c in completions]


def test_training_through_faulty_server(tmp_path, tiny_model_dir):
    model, tokenizer = tiny_model_and_tokenizer()
    flags = ("--failure-rate", "0.3", "--short-rate", "0.3", "--oov-rate", "0.1", "--seed", "1")
    with run_test_server(*flags, model_dir=tiny_model_dir) as base_url:
        backend = VLLMServerBackend(
            base_url,
            tokenizer=tokenizer,
            sampling=SamplingSettings(max_tokens=8),
            request_timeout=20.0,
            max_attempts=3,
            backoff_seconds=0.01,
            max_concurrency=4,
        )
        reward = AlignedTextReward()
        trainer = MaxEntGRPOTrainer(
            model=model,
            reward_funcs=reward,
            args=tiny_config(
                tmp_path,
                max_steps=4,
                per_device_train_batch_size=8,
                generation_max_retries=3,
                generation_max_consecutive_empty_batches=4,
            ),
            train_dataset=letter_dataset(16),
            processing_class=tokenizer,
            generation_backend=backend,
        )
        original_generate = backend.generate
        seen_prompt_ids = []

        def recording_generate(prompts, counts):
            groups = original_generate(prompts, counts)
            for prompt, group in zip(prompts, groups, strict=True):
                seen_prompt_ids.extend((prompt, c.prompt_ids) for c in group)
            return groups

        backend.generate = recording_generate
        trainer.train()
    history = trainer.state.log_history
    total = {
        key: sum(e.get(key, 0) for e in history)
        for key in ("generation/retried_prompts", "generation/invalid_completions")
    }
    assert total["generation/retried_prompts"] > 0
    assert total["generation/invalid_completions"] > 0  # out-of-vocabulary completions never became data
    assert backend.stats["retries"] > 0 and backend.stats["bad_data"] > 0
    dropped = sum(e.get("generation/dropped_prompts", 0) for e in history)
    assert reward.rows_seen == 4 * (4 * 2 - dropped)
    assert all(ids == tokenizer(prompt)["input_ids"] for prompt, ids in seen_prompt_ids)  # the server's own ids
    assert all(math.isfinite(e["loss"]) for e in history if "loss" in e)
    sampling = [e for e in history if "completions/mean_length" in e]
    assert sampling, "no batch produced data"


def _train_with_importance_sampling(trainer: MaxEntGRPOTrainer) -> list[dict]:
    # TRL's importance-sampling correction (on by default with vLLM) runs for any backend once use_vllm is on.
    trainer.use_vllm = True
    trainer.vllm_importance_sampling_correction = True
    trainer.train()
    history = trainer.state.log_history
    assert all(math.isfinite(e["loss"]) for e in history if "loss" in e)
    ratios = [
        e["sampling/importance_sampling_ratio/mean"] for e in history if "sampling/importance_sampling_ratio/mean" in e
    ]
    assert ratios and all(math.isfinite(r) for r in ratios)
    assert sum(e.get("generation/invalid_completions", 0) for e in history) > 0
    return history


def test_importance_sampling_survives_missing_and_nan_logprobs_from_the_server(tmp_path, tiny_model_dir):
    model, tokenizer = tiny_model_and_tokenizer()
    flags = ("--null-logprobs-rate", "0.2", "--nan-logprobs-rate", "0.5", "--seed", "2")
    with run_test_server(*flags, model_dir=tiny_model_dir) as base_url:
        backend = VLLMServerBackend(
            base_url, tokenizer=tokenizer, sampling=SamplingSettings(max_tokens=8), backoff_seconds=0.01
        )
        trainer = MaxEntGRPOTrainer(
            model=model,
            reward_funcs=AlignedTextReward(),
            args=tiny_config(tmp_path, max_steps=2, per_device_train_batch_size=8),
            train_dataset=letter_dataset(8),
            processing_class=tokenizer,
            generation_backend=backend,
        )
        _train_with_importance_sampling(trainer)
    assert backend.stats["bad_data"] > 0


class LogprobFreeBackend(TaggedBackend):
    """Every third completion served comes without sampler logprobs (and is not marked failed)."""

    served: int = 0

    def _completion(self, prompt: str) -> Completion:
        completion = super()._completion(prompt)
        self.served += 1
        if self.served % 3:
            return completion
        return Completion(completion.text, completion.prompt_ids, completion.completion_ids, failed=completion.failed)


def test_completions_without_sampler_logprobs_count_as_missing_when_importance_sampling_needs_them(tmp_path):
    model, tokenizer = tiny_model_and_tokenizer()
    trainer = MaxEntGRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **kwargs: [float(len(c)) for c in completions],
        args=tiny_config(tmp_path, max_steps=2, per_device_train_batch_size=8),
        train_dataset=letter_dataset(8),
        processing_class=tokenizer,
        generation_backend=LogprobFreeBackend(tokenizer),
    )
    history = _train_with_importance_sampling(trainer)
    assert sum(e.get("generation/retried_prompts", 0) for e in history) > 0  # asked again, not trained on


def test_vllm_structured_outputs_regex_constrains_what_the_server_backend_generates(tmp_path, tiny_model_dir):
    model, tokenizer = tiny_model_and_tokenizer()
    seen: list[str] = []

    def reward(completions, **kwargs):
        seen.extend(completions)
        return [float(len(c)) for c in completions]

    with run_test_server(model_dir=tiny_model_dir) as base_url:
        trainer = MaxEntGRPOTrainer(
            model=model,
            reward_funcs=reward,
            args=tiny_config(
                tmp_path,
                max_steps=1,
                vllm_structured_outputs_regex="[ab]*",
                vllm_server_base_url=base_url,
                vllm_weight_transfer="nccl",  # TRL's own push, stubbed below: the stand-in server takes no weights
            ),
            train_dataset=letter_dataset(4),
            processing_class=tokenizer,
            generation_backend=TaggedBackend(tokenizer),
        )
        # The backend `use_vllm=True, vllm_mode="server"` builds, TRL's weight sync stubbed (no vLLM installed here).
        trainer.use_vllm, trainer.vllm_mode = True, "server"
        pushes: list[str] = []
        trainer.vllm_generation = SimpleNamespace(sync_weights=lambda: pushes.append("nccl"))
        trainer.generation_backend = build_backend(trainer)
        assert isinstance(trainer.generation_backend, VLLMServerBackend)
        trainer.train()
    assert pushes == ["nccl"]  # TRL's push, before the one step's generation
    assert len(seen) == 4 and any(seen)
    assert all(re.fullmatch("[ab]*", completion) for completion in seen), seen


@pytest.mark.parametrize(
    ("servers", "async_generation"), [(1, False), (2, True)], ids=["one server", "a pool, async generation"]
)
def test_every_step_that_pushes_the_weights_logs_the_seconds_of_their_write_and_reload(
    tmp_path, tiny_model_dir, servers, async_generation
):
    model, tokenizer = tiny_model_and_tokenizer()
    flag_sets = {f"server {k}": ("--weight-endpoints",) for k in range(servers)}
    with run_test_server_processes(flag_sets, model_dir=tiny_model_dir) as started:
        trainer = MaxEntGRPOTrainer(
            model=model,
            reward_funcs=AlignedTextReward(),
            args=tiny_config(
                tmp_path,
                max_steps=3,
                use_vllm=True,
                vllm_mode="server",
                vllm_weight_transfer="disk",
                vllm_server_base_urls=[url for url, _ in started.values()],
                vllm_weights_dir=str(tmp_path / "weights"),
                async_generation=async_generation,
            ),
            train_dataset=letter_dataset(16),
            processing_class=tokenizer,
        )
        trainer.train()
    steps = [e for e in trainer.state.log_history if "generation/weight_pushes" in e]
    assert len(steps) == 3
    # Into every server each step; generating ahead, a version is pushed by the call made ahead of the step after.
    pushes = [e["generation/weight_pushes"] for e in steps]
    assert pushes == ([servers, 0, servers] if async_generation else [servers] * 3)
    # Every step writes its weights. Generating ahead, they are written behind the step and logged with their push
    # (by the call made ahead, in the step after); the last step writes its own within it (no call is made ahead).
    written = [e["generation/weight_write_seconds"] > 0 for e in steps]
    assert written == ([True, False, True] if async_generation else [True] * 3)
    for entry in steps:
        assert (entry["generation/weight_reload_seconds"] > 0) == (entry["generation/weight_pushes"] > 0)
    if async_generation:
        assert trainer.generation_backend.servers[0].disk_weights.write_behind
    stats = trainer.generation_backend.stats
    for key in ("weight_write_seconds", "weight_reload_seconds"):  # every second spent is in one step, and only one
        assert sum(e[f"generation/{key}"] for e in steps) == pytest.approx(stats[key])
    if servers > 1:
        members = trainer.generation_backend.servers
        assert stats["weight_reload_seconds"] == pytest.approx(sum(m.stats["weight_reload_seconds"] for m in members))
        assert all(m.stats["weight_reload_seconds"] > 0 for m in members)


class WeightsAtStepEnd(TrainerCallback):
    """The model's parameters after each optimizer step (and, as step 0, when training begins)."""

    def __init__(self) -> None:
        self.at: dict[int, dict[str, torch.Tensor]] = {}

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.at[0] = {name: p.detach().clone() for name, p in model.named_parameters()}

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.at[state.global_step] = {name: p.detach().clone() for name, p in model.named_parameters()}


def train_async_on_one_server(tmp_path, tiny_model_dir, callbacks=(), **overrides) -> MaxEntGRPOTrainer:
    """Four async steps of the tiny model against one stand-in server taking disk weight reloads; the trainer."""
    model, tokenizer = tiny_model_and_tokenizer()
    with run_test_server_processes({"server": ("--weight-endpoints",)}, model_dir=tiny_model_dir) as started:
        trainer = MaxEntGRPOTrainer(
            model=model,
            reward_funcs=AlignedTextReward(),
            args=tiny_config(
                tmp_path,
                max_steps=4,
                use_vllm=True,
                vllm_mode="server",
                vllm_weight_transfer="disk",
                vllm_server_base_url=started["server"][0],
                vllm_weights_dir=str(tmp_path / "weights"),
                async_generation=True,
                **overrides,
            ),
            train_dataset=letter_dataset(16),
            processing_class=tokenizer,
            callbacks=list(callbacks),
        )
        trainer.train()
    return trainer


def test_generating_ahead_the_files_written_behind_each_step_hold_the_weights_it_staged(
    tmp_path, tiny_model_dir, monkeypatch
):
    # Each write behind the step starts 0.5 s late, long after the step's forward and backward passes: an optimizer
    # step that did not wait for it would change the weights it reads.
    written: dict[int, tuple[bool, dict[str, torch.Tensor]]] = {}  # write count -> (behind, what the files hold)
    original = WeightDirectory.write

    def late_write(self, version, named_tensors):
        behind = threading.current_thread() is not threading.main_thread()
        if behind:
            time.sleep(0.5)
        path = original(self, version, named_tensors)
        loaded = {name: t for shard in sorted(path.glob("*.safetensors")) for name, t in load_file(shard).items()}
        written[int(version.split("-")[0])] = (behind, loaded)
        return path

    monkeypatch.setattr(WeightDirectory, "write", late_write)
    weights = WeightsAtStepEnd()
    train_async_on_one_server(tmp_path, tiny_model_dir, callbacks=[weights])
    # Write k holds the weights after k - 1 optimizer steps: behind steps 1 to 3, within the last one.
    assert {k: behind for k, (behind, _) in written.items()} == {1: True, 2: True, 3: True, 4: False}
    for k, (_, files) in written.items():
        staged = weights.at[k - 1]
        assert files.keys() <= staged.keys() and files
        for name, tensor in files.items():
            assert torch.equal(tensor, staged[name]), (k, name)
    assert any(not torch.equal(weights.at[0][name], weights.at[3][name]) for name in weights.at[0])  # it trained


def test_generating_ahead_every_other_window_no_version_is_written_behind_and_every_write_is_logged(
    tmp_path, tiny_model_dir, monkeypatch
):
    # num_iterations=2: a batch is trained over two windows, the second without generation. A version staged behind
    # the first would be pushed by no call (the call ahead starts in the second, from that window's weights).
    behind: list[bool] = []
    original = WeightDirectory.write

    def recorded_write(self, version, named_tensors):
        behind.append(threading.current_thread() is not threading.main_thread())
        return original(self, version, named_tensors)

    monkeypatch.setattr(WeightDirectory, "write", recorded_write)
    trainer = train_async_on_one_server(tmp_path, tiny_model_dir, num_iterations=2, max_staleness=2)
    stats = trainer.generation_backend.stats
    assert behind and not any(behind)  # every version written within its step
    assert stats["weight_pushes"] >= 2
    logged = [e for e in trainer.state.log_history if "generation/weight_write_seconds" in e]
    assert sum(e["generation/weight_write_seconds"] for e in logged) == pytest.approx(stats["weight_write_seconds"])
