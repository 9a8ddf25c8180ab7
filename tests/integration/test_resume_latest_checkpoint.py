"""`train(resume_from_checkpoint=True)` takes the latest complete checkpoint, past one whose save was cut short."""

from __future__ import annotations

import logging
import shutil

import pytest
from transformers.utils import logging as transformers_logging

from maxent_grpo import MaxEntGRPOTrainer
from maxent_grpo.rewards import vowel_start_reward
from tests.support.training import letter_dataset, tiny_config, tiny_model_and_tokenizer

pytestmark = pytest.mark.slow


def _trainer(output_dir, max_steps: int) -> MaxEntGRPOTrainer:
    model, tokenizer = tiny_model_and_tokenizer()
    return MaxEntGRPOTrainer(
        model=model,
        reward_funcs=vowel_start_reward,
        args=tiny_config(output_dir, max_steps=max_steps, save_strategy="steps", save_steps=1),
        train_dataset=letter_dataset(16, with_answers=False),
        processing_class=tokenizer,
    )


@pytest.fixture
def transformers_logs_propagate():
    """Transformers' loggers write to their own handler; let caplog see them too."""
    transformers_logging.enable_propagation()
    yield
    transformers_logging.disable_propagation()


def test_resume_true_skips_a_partial_checkpoint(tmp_path, caplog, transformers_logs_propagate):
    _trainer(tmp_path, 2).train()
    partial = tmp_path / "checkpoint-3"
    shutil.copytree(tmp_path / "checkpoint-2", partial)
    (partial / "trainer_state.json").unlink()

    resumed = _trainer(tmp_path, 4)
    with caplog.at_level(logging.WARNING):
        resumed.train(resume_from_checkpoint=True)
    assert f"Skipping {partial}: it has no trainer_state.json" in caplog.text
    assert "missing keys" not in caplog.text  # the tied lm_head.weight is not reported lost
    assert resumed.state.global_step == 4
    # Steps 1-2 come from checkpoint-2's history, 3-4 were trained after resuming.
    assert [entry["step"] for entry in resumed.state.log_history if "loss" in entry] == [1, 2, 3, 4]


def test_resume_true_without_a_complete_checkpoint_says_so(tmp_path):
    with pytest.raises(ValueError, match="No complete checkpoint found in output directory"):
        _trainer(tmp_path, 2).train(resume_from_checkpoint=True)
