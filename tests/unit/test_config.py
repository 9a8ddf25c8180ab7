"""MaxEntGRPOConfig rejects bad values with an error naming the field, the value and the allowed range."""

from __future__ import annotations

import pytest

from maxent_grpo import MaxEntGRPOConfig

BASE = {"output_dir": "unused", "use_cpu": True, "report_to": "none", "per_device_train_batch_size": 4,
        "num_generations": 4}  # fmt: skip


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("generation_max_retries", -1, "generation_max_retries=-1 is invalid: expected None or an integer >= 0"),
        ("generation_max_consecutive_empty_batches", 0, "an integer >= 1"),
        ("vllm_request_timeout", 0, "vllm_request_timeout=0 is invalid"),
        ("vllm_request_attempts", 0, "vllm_request_attempts=0 is invalid"),
        ("maxent_objective", "ppo", "one of ('grpo', 'listwise')"),
        ("maxent_tau", -0.5, "maxent_tau=-0.5 is invalid: expected a finite number >= 0"),
        ("maxent_q_temperature", 0.0, "maxent_q_temperature=0.0 is invalid"),
        ("maxent_q_epsilon", 1.0, "a number in [0, 1)"),
        ("maxent_mode_key", "nope", "maxent_mode_key='nope' is invalid"),
        ("maxent_mode_key", "no_such_module_xyz:f", "maxent_mode_key='no_such_module_xyz:f' is invalid"),
        ("kl_horizon", 0, "kl_horizon=0 is invalid"),
        ("kl_ctl_step_size", 1.5, "a number in (0, 1]"),
        ("dynamic_sampling_max_rounds", 0, "dynamic_sampling_max_rounds=0 is invalid"),
        ("dynamic_sampling_at_cap", "ignore", "'train' or 'error'"),
    ],
)
def test_bad_values_are_named(field, value, message):
    with pytest.raises(ValueError) as error:
        MaxEntGRPOConfig(**BASE, **{field: value})
    assert message in str(error.value)


def test_cross_field_rules():
    with pytest.raises(ValueError, match=r"maxent_tau_max=0.1 is invalid: expected a number >= maxent_tau_min"):
        MaxEntGRPOConfig(**BASE, maxent_tau_min=1.0, maxent_tau_max=0.1)
    with pytest.raises(ValueError, match=r"beta=0.0 is invalid.*kl_target"):
        MaxEntGRPOConfig(**BASE, beta=0.0, kl_target=0.1)
    with pytest.raises(ValueError, match=r"maxent_tau=5.0 is invalid.*maxent_target_weight_entropy"):
        MaxEntGRPOConfig(**BASE, maxent_tau=5.0, maxent_tau_max=2.0, maxent_target_weight_entropy=1.0)


def test_good_values_pass():
    config = MaxEntGRPOConfig(**BASE, maxent_objective="listwise", maxent_mode_key="boxed", dynamic_sampling=True)
    assert config.maxent_mode_key == "boxed" and config.dynamic_sampling
