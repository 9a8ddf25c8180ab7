"""MaxEntGRPOConfig rejects bad values with an error naming the field, the value and the allowed range; a plain
GRPOConfig (or None) becomes a MaxEntGRPOConfig with the same values, as TRL's GRPOTrainer would take it."""

from __future__ import annotations

import pytest
from transformers import TrainingArguments
from trl import GRPOConfig

from maxent_grpo import MaxEntGRPOConfig
from maxent_grpo.config import maxent_config_from

BASE = {"output_dir": "unused", "use_cpu": True, "report_to": "none", "per_device_train_batch_size": 4,
        "num_generations": 4}  # fmt: skip


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("generation_max_retries", -1, "generation_max_retries=-1 is invalid: expected None or an integer >= 0"),
        ("generation_max_consecutive_empty_batches", 0, "an integer >= 1"),
        ("vllm_request_timeout", 0, "vllm_request_timeout=0 is invalid"),
        ("generation_step_timeout", 0.0, "generation_step_timeout=0.0 is invalid: expected None or a finite number"),
        ("generation_step_timeout", float("inf"), "generation_step_timeout=inf is invalid"),
        ("vllm_request_attempts", 0, "vllm_request_attempts=0 is invalid"),
        ("vllm_dtype", "fp8", "vllm_dtype='fp8' is invalid: expected one of ('training', 'auto'"),
        ("maxent_objective", "ppo", "one of ('grpo', 'listwise')"),
        ("maxent_tau", -0.5, "maxent_tau=-0.5 is invalid: expected a finite number >= 0"),
        ("maxent_q_temperature", 0.0, "maxent_q_temperature=0.0 is invalid"),
        ("maxent_q_epsilon", 1.0, "a number in [0, 1)"),
        ("maxent_tau_anneal_fraction", 0.0, "maxent_tau_anneal_fraction=0.0 is invalid: expected a number in (0, 1]"),
        ("maxent_tau_anneal_fraction", 1.5, "a number in (0, 1]"),
        ("maxent_mode_key", "nope", "maxent_mode_key='nope' is invalid"),
        ("maxent_mode_probability", "exact", "maxent_mode_probability='exact' is invalid: expected one of ('count'"),
        ("maxent_mode_key", "no_such_module_xyz:f", "maxent_mode_key='no_such_module_xyz:f' is invalid"),
        ("kl_horizon", 0, "kl_horizon=0 is invalid"),
        ("kl_ctl_step_size", 1.5, "a number in (0, 1]"),
        ("dynamic_sampling_max_rounds", 0, "dynamic_sampling_max_rounds=0 is invalid"),
        ("dynamic_sampling_at_cap", "ignore", "'train' or 'error'"),
        ("beta", -0.5, "beta=-0.5 is invalid: expected a finite number >= 0"),
        ("learning_rate", -0.01, "learning_rate=-0.01 is invalid"),
        ("learning_rate", float("nan"), "learning_rate=nan is invalid"),
        ("per_device_train_batch_size", 0, "per_device_train_batch_size=0 is invalid: expected an integer >= 1"),
        ("max_completion_length", 0, "max_completion_length=0 is invalid: expected an integer >= 1"),
    ],
)
def test_bad_values_are_named(field, value, message):
    with pytest.raises(ValueError) as error:
        MaxEntGRPOConfig(**{**BASE, field: value})
    assert message in str(error.value)


def test_cross_field_rules():
    with pytest.raises(ValueError, match=r"maxent_tau_max=0.1 is invalid: expected a number >= maxent_tau_min"):
        MaxEntGRPOConfig(**BASE, maxent_tau_min=1.0, maxent_tau_max=0.1)
    with pytest.raises(ValueError, match=r"beta=0.0 is invalid.*kl_target"):
        MaxEntGRPOConfig(**BASE, beta=0.0, kl_target=0.1)
    with pytest.raises(ValueError, match=r"maxent_tau=5.0 is invalid.*maxent_target_weight_entropy"):
        MaxEntGRPOConfig(**BASE, maxent_tau=5.0, maxent_tau_max=2.0, maxent_target_weight_entropy=1.0)
    with pytest.raises(ValueError, match=r"maxent_tau_final=0.0 is invalid: expected None or a finite number > 0"):
        MaxEntGRPOConfig(**BASE, maxent_tau_final=0.0)
    with pytest.raises(ValueError, match=r"maxent_tau=0.0 is invalid.*maxent_tau_final"):
        MaxEntGRPOConfig(**BASE, maxent_tau=0.0, maxent_tau_final=0.1)
    with pytest.raises(ValueError, match=r"maxent_tau_final=0.1 is invalid.*maxent_target_weight_entropy"):
        MaxEntGRPOConfig(**BASE, maxent_tau_final=0.1, maxent_target_weight_entropy=1.0)
    with pytest.raises(ValueError, match=r"maxent_mode_probability='policy' is invalid: expected 'count' when maxent"):
        MaxEntGRPOConfig(**BASE, maxent_mode_probability="policy")


def test_good_values_pass():
    config = MaxEntGRPOConfig(**BASE, maxent_objective="listwise", maxent_mode_key="boxed", dynamic_sampling=True)
    assert config.maxent_mode_key == "boxed" and config.dynamic_sampling


def test_grpo_config_converts_with_its_values_and_maxent_defaults(tmp_path):
    user_values = {**BASE, "output_dir": str(tmp_path / "run"), "learning_rate": 3e-4, "num_generations": 2,
                   "beta": 0.05, "loss_type": "dr_grpo", "steps_per_generation": 2, "max_completion_length": 17,
                   "lr_scheduler_type": "cosine", "scale_rewards": False}  # fmt: skip
    plain = GRPOConfig(**user_values)
    converted = maxent_config_from(plain, "unused/model")
    assert isinstance(converted, MaxEntGRPOConfig) and converted is not plain
    # Exactly what writing MaxEntGRPOConfig with the same arguments gives: the same values, MaxEnt fields at defaults.
    assert converted.to_dict() == MaxEntGRPOConfig(**user_values).to_dict()
    # Fields GRPOConfig derives in __post_init__ keep their derived values (re-deriving them would fail).
    assert (converted.generation_batch_size, converted.steps_per_generation) == (8, 2)
    assert (converted.scale_rewards, converted.report_to) == ("none", [])
    assert (converted.learning_rate, converted.beta, converted.loss_type) == (3e-4, 0.05, "dr_grpo")


def test_config_from_passes_maxent_config_through_and_defaults_like_trl(default_config_buildable):
    config = MaxEntGRPOConfig(**BASE, maxent_objective="listwise")
    assert maxent_config_from(config, "unused") is config
    default = maxent_config_from(None, "org/some-model")
    assert isinstance(default, MaxEntGRPOConfig)
    assert default.to_dict() == MaxEntGRPOConfig("some-model-GRPO").to_dict()


def test_config_from_rejects_other_arguments():
    with pytest.raises(
        TypeError, match=r"args must be a MaxEntGRPOConfig, a trl\.GRPOConfig or None, got TrainingArg"
    ):
        maxent_config_from(TrainingArguments(output_dir="unused", use_cpu=True, report_to="none"), "unused")
    with pytest.raises(TypeError, match="got dict"):
        maxent_config_from({"learning_rate": 1e-3}, "unused")
