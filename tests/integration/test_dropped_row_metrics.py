"""No metric, table column or controller sees a placeholder row (I3, I6)."""

from __future__ import annotations

import pytest

from maxent_grpo import MaxEntGRPOTrainer
from maxent_grpo.tiny_model import build_tiny_tokenizer
from maxent_grpo.training.empty_batches import NoUsableGenerationError
from tests.support.tagged_backend import TaggedBackend
from tests.support.training import letter_dataset, tiny_config, tiny_model_and_tokenizer

pytestmark = pytest.mark.slow

LOSS_METRICS = ("kl", "entropy", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean")
REWARD_METRICS = ("reward", "reward_std", "frac_reward_zero_std", "rewards/digit_reward/mean")


def digit_reward(completions, **kwargs):
    return [float(completion[-1]) for completion in completions]


def constant_reward(completions, **kwargs):
    return [1.0] * len(completions)


def _keys(trainer):
    return {key for entry in trainer.state.log_history for key in entry}


def _logged(trainer, key):
    return [entry[key] for entry in trainer.state.log_history if key in entry]


def test_a_fully_dropped_batch_logs_no_loss_or_reward_metric_and_moves_no_controller(tmp_path, tiny_model_dir):
    backend = TaggedBackend(build_tiny_tokenizer(), always_fail=True)
    trainer = MaxEntGRPOTrainer(
        model=str(tiny_model_dir),
        reward_funcs=digit_reward,
        args=tiny_config(
            tmp_path,
            max_steps=2,
            beta=0.1,
            kl_target=0.01,
            maxent_objective="listwise",
            generation_max_consecutive_empty_batches=5,
        ),
        train_dataset=letter_dataset(8),
        processing_class=build_tiny_tokenizer(),
        generation_backend=backend,
    )
    with pytest.raises(NoUsableGenerationError, match="every one of the 2 generation batches"):
        trainer.train()
    assert _logged(trainer, "generation/dropped_prompts") == [1.0, 1.0]
    assert not _keys(trainer) & {*LOSS_METRICS, *REWARD_METRICS}, "a metric was computed over placeholders"
    assert set(_logged(trainer, "maxent/beta")) == {0.1}  # no placeholder KL reached the beta controller
    assert len(trainer._logs["prompt"]) == 0  # the completions table holds no placeholder row


def test_frac_reward_zero_std_counts_kept_groups_only(tmp_path):
    model, tokenizer = tiny_model_and_tokenizer()
    backend = TaggedBackend(tokenizer, empty_positions=frozenset({2}))  # third group of each batch is dropped
    trainer = MaxEntGRPOTrainer(
        model=model,
        reward_funcs=constant_reward,
        args=tiny_config(tmp_path, per_device_train_batch_size=12, max_steps=2, generation_max_retries=0),
        train_dataset=letter_dataset(12),
        processing_class=tokenizer,
        generation_backend=backend,
    )
    trainer.train()
    assert _logged(trainer, "generation/dropped_prompts") == [1.0, 1.0]
    assert _logged(trainer, "frac_reward_zero_std") == [1.0, 1.0]  # both kept groups are flat, none "has spread"
    assert len(trainer._logs["prompt"]) == len(trainer._logs["completion"]) == 8  # two kept groups of four
    assert all(completion for completion in trainer._logs["completion"])


def test_sequence_level_importance_ratios_are_over_kept_rows(tmp_path):
    model, tokenizer = tiny_model_and_tokenizer()
    backend = TaggedBackend(tokenizer, empty_positions=frozenset({1}))  # the sampler claims logprob -1 per token
    trainer = MaxEntGRPOTrainer(
        model=model,
        reward_funcs=digit_reward,
        args=tiny_config(
            tmp_path,
            per_device_train_batch_size=8,
            max_steps=2,
            generation_max_retries=0,
            vllm_importance_sampling_mode="sequence_truncate",
        ),
        train_dataset=letter_dataset(8),
        processing_class=tokenizer,
        generation_backend=backend,
    )
    # TRL's importance-sampling correction runs for any backend that reports sampler log-probs once use_vllm is on.
    trainer.use_vllm = True
    trainer.vllm_importance_sampling_correction = True
    trainer.train()
    assert _logged(trainer, "generation/dropped_prompts") == [1.0, 1.0]
    # The tiny model's log-probs are far below -1 per token: every kept sequence's ratio is tiny. A placeholder
    # would count as exactly 1.0.
    for suffix in ("min", "mean", "max"):
        values = _logged(trainer, f"sampling/importance_sampling_ratio/{suffix}")
        assert len(values) == 2 and all(0 <= v < 0.01 for v in values), (suffix, values)


def test_log_extra_columns_keep_first_round_values_under_dynamic_sampling(tmp_path):
    model, tokenizer = tiny_model_and_tokenizer()

    def tagged_reward(prompts, completions, log_extra, **kwargs):
        log_extra("completion_copy", list(completions))
        return [0.0 if int(p[1:-1]) % 2 == 0 else float(c[-1]) for p, c in zip(prompts, completions, strict=True)]

    trainer = MaxEntGRPOTrainer(
        model=model,
        reward_funcs=tagged_reward,
        args=tiny_config(
            tmp_path,
            per_device_train_batch_size=12,
            max_steps=3,
            dynamic_sampling=True,
            dynamic_sampling_max_rounds=8,
        ),
        train_dataset=letter_dataset(12),
        processing_class=tokenizer,
        generation_backend=TaggedBackend(tokenizer),
    )
    trainer.train()
    assert sum(_logged(trainer, "dynamic_sampling/filtered_groups")) > 0  # some groups were replaced
    completions = list(trainer._logs["completion"])
    copies = list(trainer._logs["extra"]["completion_copy"])
    assert copies == completions  # every row's column is its own completion, first round or refilled


def test_trl_adaptive_entropy_control_ignores_batches_without_kept_rows(tmp_path):
    model, tokenizer = tiny_model_and_tokenizer()
    trainer = MaxEntGRPOTrainer(
        model=model,
        reward_funcs=digit_reward,
        args=tiny_config(
            tmp_path,
            max_steps=3,
            entropy_coef=0.01,
            use_adaptive_entropy=True,
            entropy_target=1.0,
            generation_max_consecutive_empty_batches=5,
        ),
        train_dataset=letter_dataset(8),
        processing_class=tokenizer,
        generation_backend=TaggedBackend(tokenizer, always_fail=True),
    )
    before = (trainer.entropy_coef, trainer._last_world_entropy)
    with pytest.raises(NoUsableGenerationError):
        trainer.train()
    assert (trainer.entropy_coef, trainer._last_world_entropy) == before


def test_completions_table_keeps_the_kept_rows_of_an_eval_batch_larger_than_the_table(tmp_path):
    # TRL's table keeps the last generation_batch_size rows (4 here); the eval batch has 8: the second group, the
    # table's last 4 rows, is dropped. What remains is the first group's 4 kept rows, not placeholders.
    model, tokenizer = tiny_model_and_tokenizer()
    trainer = MaxEntGRPOTrainer(
        model=model,
        reward_funcs=digit_reward,
        args=tiny_config(tmp_path, per_device_eval_batch_size=8, generation_max_retries=0),
        train_dataset=letter_dataset(8),
        processing_class=tokenizer,
        generation_backend=TaggedBackend(tokenizer, empty_positions=frozenset({1})),
    )
    assert trainer._logs["prompt"].maxlen == 4
    trainer.evaluate(letter_dataset(2))
    prompts, completions = list(trainer._logs["prompt"]), list(trainer._logs["completion"])
    assert len(prompts) == len(completions) == len(trainer._logs["advantages"]) == 4
    assert len(set(prompts)) == 1  # one whole group
    assert all(completion.startswith(prompts[0].rstrip(":") + "|") for completion in completions)
    assert all(reward == reward for reward in trainer._logs["rewards"]["digit_reward"])  # no NaN placeholder
