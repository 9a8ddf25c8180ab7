"""Invariants I1-I5 under faults: nothing misaligned, short groups retried, incomplete groups dropped everywhere."""

from __future__ import annotations

import logging
import math

import pytest
import torch

from maxent_grpo import MaxEntGRPOTrainer
from maxent_grpo.training.empty_batches import NoUsableGenerationError
from tests.support.tagged_backend import TaggedBackend, assert_row_aligned, prompt_tag
from tests.support.training import letter_dataset, tiny_config, tiny_model_and_tokenizer

pytestmark = pytest.mark.slow


class AlignmentReward:
    """Fails loudly when a completion's tag does not match its row's prompt or answer column."""

    __name__ = "alignment_reward"

    def __init__(self) -> None:
        self.rows_seen = 0

    def __call__(self, prompts, completions, completion_ids, answer, **kwargs):
        rewards = []
        for prompt, completion, answer_tag in zip(prompts, completions, answer, strict=True):
            assert_row_aligned(prompt, completion, answer_tag)
            rewards.append(float(completion.endswith(("1", "3", "5"))))
        self.rows_seen += len(prompts)
        return rewards


def _trainer(tmp_path, backend, **overrides):
    model, tokenizer = tiny_model_and_tokenizer()
    reward = AlignmentReward()
    args = tiny_config(tmp_path, **overrides)
    trainer = MaxEntGRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=letter_dataset(16),
        processing_class=tokenizer,
        generation_backend=backend,
    )
    return trainer, reward, tokenizer


def _logged(trainer, key):
    return [entry[key] for entry in trainer.state.log_history if key in entry]


def test_generate_rows_belong_to_their_prompts(tmp_path):
    _, tokenizer = tiny_model_and_tokenizer()
    backend = TaggedBackend(tokenizer, slot_failure_rate=0.3, short_group_rate=0.3, oov_rate=0.1, seed=3)
    trainer, _, _ = _trainer(tmp_path, backend, generation_max_retries=0)
    prompts = [f"p{i}:" for i in range(4) for _ in range(4)]
    prompt_ids, completion_ids, tool_mask, completions, *_ = trainer._generate(prompts)
    assert len(prompt_ids) == len(completion_ids) == len(completions) == len(prompts)  # I1
    keep = trainer._batch.keep
    assert not all(keep), "with these faults and no retries some group must be dropped"
    assert tool_mask is not None
    for i, prompt in enumerate(prompts):
        assert tokenizer.decode(prompt_ids[i]) == prompt or not keep[i]  # I2: the backend's own prompt ids
        if keep[i]:
            assert completions[i].split("|")[0] == prompt_tag(prompt)
            assert tokenizer.decode(completion_ids[i], skip_special_tokens=True) == completions[i]
            assert all(0 <= t < len(tokenizer) for t in completion_ids[i])  # I5
            assert set(tool_mask[i]) == {1}
        else:
            assert set(tool_mask[i]) == {0}
    for start in range(0, len(prompts), 4):  # groups are kept or dropped whole
        assert len(set(keep[start : start + 4])) == 1


def test_training_with_faults_stays_aligned_and_counts_retries_and_drops(tmp_path):
    _, tokenizer = tiny_model_and_tokenizer()
    backend = TaggedBackend(tokenizer, slot_failure_rate=0.3, short_group_rate=0.3, oov_rate=0.05, raise_rate=0.1)
    trainer, reward, _ = _trainer(
        tmp_path,
        backend,
        max_steps=6,
        per_device_train_batch_size=8,
        generation_max_retries=1,
        generation_max_consecutive_empty_batches=6,
    )
    trainer.train()
    retried = _logged(trainer, "generation/retried_prompts")
    dropped = _logged(trainer, "generation/dropped_prompts")
    rounds = _logged(trainer, "generation/retry_rounds")
    assert len(retried) == len(dropped) == len(rounds) == 6
    assert sum(retried) > 0 and sum(dropped) > 0
    assert max(rounds) <= 1  # the retry cap holds
    assert sum(_logged(trainer, "generation/invalid_completions")) > 0
    assert all(max(counts) <= 4 for counts in backend.calls)  # never asks for more than the group size
    # Retry calls ask only for deficits: every call after the first of a step asks for fewer than a full group.
    assert any(min(counts) < 4 for counts in backend.calls)
    # The reward function saw only kept rows: 4 rows per kept group.
    kept_groups = 2 * 6 - sum(dropped)
    assert reward.rows_seen == 4 * kept_groups
    assert all(math.isfinite(loss) for loss in _logged(trainer, "loss"))


def test_fully_dropped_batch_makes_no_update_and_says_why(tmp_path, caplog):
    _, tokenizer = tiny_model_and_tokenizer()
    backend = TaggedBackend(tokenizer, always_fail=True)
    trainer, reward, _ = _trainer(tmp_path, backend, max_steps=2, generation_max_consecutive_empty_batches=3)
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    with caplog.at_level(logging.WARNING), pytest.raises(NoUsableGenerationError, match="no parameter was updated"):
        trainer.train()
    for name, param in trainer.model.named_parameters():
        assert torch.equal(param.detach(), before[name]), f"{name} changed on an empty batch"
    assert reward.rows_seen == 0
    assert "makes no parameter update" in caplog.text and "backend is down" in caplog.text
    for entry in trainer.state.log_history:
        for key, value in entry.items():
            assert not (isinstance(value, float) and math.isnan(value)), key
    assert _logged(trainer, "generation/dropped_prompts") == [1.0, 1.0]


def test_consecutive_empty_batches_stop_the_run(tmp_path):
    _, tokenizer = tiny_model_and_tokenizer()
    backend = TaggedBackend(tokenizer, always_fail=True)
    trainer, _, _ = _trainer(tmp_path, backend, max_steps=5, generation_max_consecutive_empty_batches=2)
    with pytest.raises(NoUsableGenerationError, match=r"no usable prompt group in 2 consecutive.*backend is down"):
        trainer.train()
