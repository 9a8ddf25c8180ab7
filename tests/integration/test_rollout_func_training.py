"""`rollout_func` trains through the retry / drop path: its malformed rows are retried, never misaligned."""

from __future__ import annotations

import pytest
import torch

from maxent_grpo import MaxEntGRPOTrainer
from tests.support.training import letter_dataset, tiny_config, tiny_model_and_tokenizer

pytestmark = pytest.mark.filterwarnings("ignore:You are using 'rollout_func'")


class TaggingRollout:
    """Completes the k-th row of prompt "p<i>:" with "p<i>|<k>" and EOS; its first call returns two rows with ids
    outside the vocabulary."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.calls: list[list[str]] = []

    def __call__(self, prompts, trainer):
        self.calls.append(list(prompts))
        tokenizer = self.tokenizer
        texts = [f"{p.rstrip(':')}|{k}" for k, p in enumerate(prompts)]
        completion_ids = [[*tokenizer(text)["input_ids"], tokenizer.eos_token_id] for text in texts]
        if len(self.calls) == 1:
            completion_ids[0] = [len(tokenizer) + 3, tokenizer.eos_token_id]
            completion_ids[3] = [-1]
        return {
            "prompt_ids": [tokenizer(p)["input_ids"] for p in prompts],
            "completion_ids": completion_ids,
            "logprobs": [[-1.0] * len(ids) for ids in completion_ids],
            "env_mask": [[1] * (len(ids) - 1) + [0] for ids in completion_ids],
        }


def _reward(prompts, completions, answer, **kwargs):
    for prompt, completion, tag in zip(prompts, completions, answer, strict=True):
        assert prompt == tag + ":" and completion.split("|")[0] == tag, (
            f"misaligned: {prompt!r} {completion!r} {tag!r}"
        )
    return [float(completion.split("|")[1]) for completion in completions]


def test_rollout_func_rows_are_retried_and_stay_aligned(tmp_path):
    model, tokenizer = tiny_model_and_tokenizer()
    rollout = TaggingRollout(tokenizer)
    trainer = MaxEntGRPOTrainer(
        model=model,
        reward_funcs=_reward,
        args=tiny_config(tmp_path),
        train_dataset=letter_dataset(),
        processing_class=tokenizer,
        rollout_func=rollout,
    )
    before = {name: param.detach().clone() for name, param in trainer.model.named_parameters()}
    trainer.train()
    assert [len(call) for call in rollout.calls[:2]] == [4, 2]  # the second call asks for just the two bad rows
    logs = [entry for entry in trainer.state.log_history if "generation/invalid_completions" in entry]
    assert [entry["generation/invalid_completions"] for entry in logs] == [2.0, 0.0]
    assert [entry["generation/dropped_prompts"] for entry in logs] == [0.0, 0.0]
    assert any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())


def test_a_rollout_func_without_its_keys_stops_training(tmp_path):
    model, tokenizer = tiny_model_and_tokenizer()
    trainer = MaxEntGRPOTrainer(
        model=model,
        reward_funcs=_reward,
        args=tiny_config(tmp_path),
        train_dataset=letter_dataset(),
        processing_class=tokenizer,
        rollout_func=lambda prompts, trainer: {"prompt_ids": [[1]] * len(prompts)},
    )
    with pytest.raises(ValueError, match=r"rollout_func must return keys \['completion_ids', 'logprobs'\]"):
        trainer.train()


def test_rollout_func_excludes_a_generation_backend(tmp_path):
    model, tokenizer = tiny_model_and_tokenizer()
    with pytest.raises(ValueError, match="cannot be combined with `generation_backend`"):
        MaxEntGRPOTrainer(
            model=model,
            reward_funcs=_reward,
            args=tiny_config(tmp_path),
            train_dataset=letter_dataset(),
            processing_class=tokenizer,
            rollout_func=TaggingRollout(tokenizer),
            generation_backend=TaggingRollout(tokenizer),
        )


class RolloutWithFields(TaggingRollout):
    """`TaggingRollout`, also returning per row the prompt it answered (``answered``, a list) and one value for every
    row (``episode_kind``), which reward functions receive as keyword arguments, as under TRL."""

    def __call__(self, prompts, trainer):
        output = super().__call__(prompts, trainer)
        return {**output, "answered": [p.rstrip(":") for p in prompts], "episode_kind": "tagging"}


def test_rollout_func_fields_reach_reward_functions_row_by_row_also_for_retried_rows(tmp_path):
    model, tokenizer = tiny_model_and_tokenizer()
    seen: list[tuple[str, str, str]] = []

    def reward(prompts, completions, answer, answered, episode_kind, **kwargs):
        seen.extend(zip(answer, answered, episode_kind, strict=True))
        return _reward(prompts, completions, answer)

    trainer = MaxEntGRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=tiny_config(tmp_path),
        train_dataset=letter_dataset(),
        processing_class=tokenizer,
        rollout_func=RolloutWithFields(tokenizer),
    )
    trainer.train()
    assert len(seen) == 2 * 4  # two steps of four rows, the two retried ones of step 1 included
    assert all(tag == answered and kind == "tagging" for tag, answered, kind in seen)
