"""Dynamic sampling: groups without learning signal are refilled from the data, through the same retry/drop path."""

from __future__ import annotations

import json

import pytest
import torch
from datasets import Dataset

from maxent_grpo import MaxEntGRPOTrainer
from maxent_grpo.training.checkpoints.extra_state import CONTROLLER_STATE_FILE
from tests.support.tagged_backend import TaggedBackend, assert_row_aligned
from tests.support.training import tiny_config, tiny_model_and_tokenizer

pytestmark = pytest.mark.slow


class HalfConstantReward:
    """Constant 0 for prompts "c<i>:", a varying, prompt-checked reward for prompts "v<i>:"."""

    __name__ = "half_constant"

    def __call__(self, prompts, completions, answer, **kwargs):
        rewards = []
        for prompt, completion, answer_tag in zip(prompts, completions, answer, strict=True):
            assert_row_aligned(prompt, completion, answer_tag)
            rewards.append(0.0 if prompt.startswith("c") else float(completion[-1]))
        return rewards


class RewardRecorder(MaxEntGRPOTrainer):
    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.trained_rewards.append(self._batch.rewards_per_func[:, 0].clone())
        self.trained_prompts.append([row["prompt"] for row in inputs])
        return output


def _dataset(constant: int, varying: int) -> Dataset:
    prompts = [f"c{i}:" for i in range(constant)] + [f"v{i}:" for i in range(varying)]
    return Dataset.from_dict({"prompt": prompts, "answer": [p.rstrip(":") for p in prompts]})


def _trainer(tmp_path, dataset, backend=None, reward=None, **overrides):
    model, tokenizer = tiny_model_and_tokenizer()
    args = tiny_config(tmp_path, per_device_train_batch_size=8, num_generations=4, dynamic_sampling=True, **overrides)
    trainer = RewardRecorder(
        model=model,
        reward_funcs=reward or HalfConstantReward(),
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        generation_backend=backend or TaggedBackend(tokenizer, slot_failure_rate=0.2),
    )
    trainer.trained_rewards, trainer.trained_prompts = [], []
    return trainer


def _logged(trainer, key):
    return [entry[key] for entry in trainer.state.log_history if key in entry]


def test_every_trained_group_has_signal_and_columns_travel_with_prompts(tmp_path):
    trainer = _trainer(tmp_path, _dataset(8, 8), max_steps=4, dynamic_sampling_max_rounds=12)
    trainer.train()
    assert len(trainer.trained_rewards) == 4
    for rewards, prompts in zip(trainer.trained_rewards, trainer.trained_prompts, strict=True):
        groups = rewards.view(-1, 4)
        assert torch.isfinite(groups).all()
        assert (groups.max(dim=1).values - groups.min(dim=1).values > 0).all(), groups
        assert all(p.startswith("v") for p in prompts)  # constant-reward prompts were all replaced
    filtered = _logged(trainer, "dynamic_sampling/filtered_groups")
    rounds = _logged(trainer, "dynamic_sampling/rounds")
    generated = _logged(trainer, "dynamic_sampling/generated_groups")
    assert len(filtered) == len(rounds) == len(generated) == 4
    assert sum(filtered) > 0 and sum(rounds) > 0
    assert all(g >= 1.0 for g in generated)


def test_cap_is_respected_and_training_continues(tmp_path):
    trainer = _trainer(tmp_path, _dataset(8, 0), max_steps=2, dynamic_sampling_max_rounds=2)
    trainer.train()
    assert _logged(trainer, "dynamic_sampling/rounds") == [2.0, 2.0]
    assert _logged(trainer, "dynamic_sampling/filtered_groups") == [2.0, 2.0]
    assert _logged(trainer, "dynamic_sampling/generated_groups") == [6.0, 6.0]  # 2 + 2 * 2 refills, none with signal
    assert all(loss == 0.0 for loss in _logged(trainer, "loss"))


def test_cap_can_stop_the_run(tmp_path):
    trainer = _trainer(tmp_path, _dataset(8, 0), max_steps=2, dynamic_sampling_max_rounds=1,
                       dynamic_sampling_at_cap="error")  # fmt: skip
    with pytest.raises(RuntimeError, match=r"still have no learning signal after dynamic_sampling_max_rounds=1"):
        trainer.train()


def test_works_with_the_listwise_objective(tmp_path):
    trainer = _trainer(
        tmp_path,
        _dataset(8, 8),
        max_steps=3,
        dynamic_sampling_max_rounds=12,
        maxent_objective="listwise",
        maxent_mode_key="last_line",
    )
    trainer.train()
    for rewards in trainer.trained_rewards:
        groups = rewards.view(-1, 4)
        assert (groups.max(dim=1).values - groups.min(dim=1).values > 0).all()
    assert len(_logged(trainer, "maxent/weight_entropy")) == 3


def test_unknown_metric_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match=r"dynamic_sampling_metric='nope' is invalid.*half_constant"):
        _trainer(tmp_path, _dataset(4, 4), dynamic_sampling_metric="nope")


def test_generation_batch_counter_travels_with_checkpoints(tmp_path):
    # Two generation batches per optimizer step: the sampler counts both, the checkpoint keeps the count.
    overrides = {"gradient_accumulation_steps": 2, "steps_per_generation": 1}
    overrides |= {"save_strategy": "steps", "save_steps": 1}
    trainer = _trainer(tmp_path, _dataset(8, 8), max_steps=1, **overrides)
    trainer.train()
    first = json.loads((tmp_path / "checkpoint-1" / CONTROLLER_STATE_FILE).read_text())
    assert first == {"dynamic_sampler": {"generation_batches": 2}}  # no listwise objective: no controller keys

    resumed = _trainer(tmp_path, _dataset(8, 8), max_steps=2, **overrides)
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-1"))
    second = json.loads((tmp_path / "checkpoint-2" / CONTROLLER_STATE_FILE).read_text())
    assert second == {"dynamic_sampler": {"generation_batches": 4}}  # counted on from the restored 2


def test_checkpoint_holds_both_states_and_old_listwise_files_still_load(tmp_path):
    # A constant τ (no annealing schedule), so that the τ restored from the checkpoint is the one step 2 uses.
    overrides = {"maxent_objective": "listwise", "maxent_tau_final": None, "save_strategy": "steps", "save_steps": 1}
    trainer = _trainer(tmp_path, _dataset(8, 8), max_steps=1, **overrides)
    trainer.train()
    path = tmp_path / "checkpoint-1" / CONTROLLER_STATE_FILE
    state = json.loads(path.read_text())
    assert state["dynamic_sampler"] == {"generation_batches": 1}
    assert set(state) == {"tau", "beta", "trainer_beta", "dynamic_sampler"}

    # A checkpoint written before the sampler had state: listwise keys only.
    del state["dynamic_sampler"]
    state["tau"]["tau"] = 0.37
    path.write_text(json.dumps(state))
    resumed = _trainer(tmp_path, _dataset(8, 8), max_steps=2, **overrides)
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-1"))
    assert [e["maxent/tau"] for e in resumed.state.log_history if e["step"] == 2 and "maxent/tau" in e] == [0.37]
    after = json.loads((tmp_path / "checkpoint-2" / CONTROLLER_STATE_FILE).read_text())
    assert after["dynamic_sampler"] == {"generation_batches": 1}  # nothing to restore: counted from 0


class ColumnRecorder(RewardRecorder):
    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.trained_columns.append([sorted(row) for row in inputs])
        return output


def _constant_for_c_prompts(prompts, completions, **kwargs):
    rows = zip(prompts, completions, strict=True)
    return [0.0 if prompt.startswith("c") else float(completion[-1]) for prompt, completion in rows]


def test_replacement_rows_have_the_columns_of_the_loader_rows(tmp_path):
    # remove_unused_columns=True: the data loader's rows hold TRL's signature columns only ("prompt"), and so must the
    # rows drawn to replace flat groups (a mix makes TRL's reward call fail on the missing column).
    model, tokenizer = tiny_model_and_tokenizer()
    args = tiny_config(
        tmp_path, per_device_train_batch_size=8, max_steps=3, dynamic_sampling=True, remove_unused_columns=True
    )
    trainer = ColumnRecorder(
        model=model,
        reward_funcs=_constant_for_c_prompts,
        args=args,
        train_dataset=_dataset(8, 8),
        processing_class=tokenizer,
        generation_backend=TaggedBackend(tokenizer),
    )
    trainer.trained_rewards, trainer.trained_prompts, trainer.trained_columns = [], [], []
    trainer.train()
    assert sum(_logged(trainer, "dynamic_sampling/rounds")) > 0  # rows were replaced
    assert trainer.trained_columns == [[["prompt"]] * 8] * 3


def _logs_the_share_of_varying_prompts(prompts, completions, log_metric, **kwargs):
    log_metric("varying_share", sum(prompt.startswith("v") for prompt in prompts) / len(prompts))
    return _constant_for_c_prompts(prompts, completions)


def test_logged_metrics_describe_the_trained_rows_only(tmp_path):
    # A value a reward function logs is a statistic of the rows it was called with: after refill rounds it must be
    # the statistic of the rows that train, not an average over rounds that scored groups later filtered out.
    model, tokenizer = tiny_model_and_tokenizer()
    args = tiny_config(
        tmp_path, per_device_train_batch_size=8, max_steps=3, dynamic_sampling=True, dynamic_sampling_max_rounds=2
    )
    trainer = RewardRecorder(
        model=model,
        reward_funcs=_logs_the_share_of_varying_prompts,
        args=args,
        train_dataset=_dataset(8, 8),
        processing_class=tokenizer,
        generation_backend=TaggedBackend(tokenizer),
    )
    trainer.trained_rewards, trainer.trained_prompts = [], []
    trainer.train()
    assert sum(_logged(trainer, "dynamic_sampling/rounds")) > 0  # groups were refilled
    expected = [sum(p.startswith("v") for p in prompts) / len(prompts) for prompts in trainer.trained_prompts]
    assert _logged(trainer, "varying_share") == pytest.approx(expected)


class FailsFirstCall(HalfConstantReward):
    """`HalfConstantReward`, except that its first call raises `ConnectionError` (``reward_retries=0``)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, **kwargs):
        self.calls += 1
        if self.calls == 1:
            raise ConnectionError("the scorer is unreachable")
        return super().__call__(**kwargs)


def test_groups_a_failed_call_left_unscored_are_refilled_and_scored(tmp_path):
    # The first scoring of the step fails: its rows have no reward, so their groups have no signal and are refilled
    # like any other; the rows that train were all scored by a later round, and none is left out.
    failing = FailsFirstCall()
    backend = TaggedBackend(tiny_model_and_tokenizer()[1])
    trainer = _trainer(tmp_path, _dataset(0, 16), backend=backend, reward=failing, max_steps=1, reward_retries=0)
    trainer.train()
    (rewards,) = trainer.trained_rewards
    assert failing.calls >= 2
    assert not torch.isnan(rewards).any()
    assert _logged(trainer, "scoring/half_constant/failed") == [1.0]
    assert _logged(trainer, "scoring/unscored_rows") == [0.0]
    assert _logged(trainer, "dynamic_sampling/filtered_groups") == [2.0]
