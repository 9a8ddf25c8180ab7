"""MaxEntGRPOConfig rejects bad values with an error naming the field, the value and the allowed range; a plain
GRPOConfig (or None) becomes a MaxEntGRPOConfig with the same values, as TRL's GRPOTrainer would take it."""

from __future__ import annotations

import logging

import pytest
from transformers import TrainingArguments
from transformers.trainer_utils import IntervalStrategy
from trl import GRPOConfig

from maxent_grpo import MaxEntGRPOConfig
from maxent_grpo.config import maxent_config_from
from maxent_grpo.enum_fields import field_choices
from maxent_grpo.field_ranges import FIELD_RANGES

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
        ("dynamic_sampling_at_cap", "ignore", "one of ('train', 'error')"),
        ("tool_timeout", 0.0, "tool_timeout=0.0 is invalid: expected None or a finite number"),
        ("tool_error_policy", "ignore", "one of ('feedback', 'retry')"),
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


INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        # TRL fields TRL or torch would refuse only later, with a traceback, or never
        ("num_generations", 0, "num_generations=0 is invalid: expected an integer >= 2."),
        ("num_generations", None, "num_generations=None is invalid: expected an integer >= 2."),
        ("max_steps", 0, "max_steps=0 is invalid: expected -1 or an integer >= 1."),
        ("max_steps", None, "max_steps=None is invalid"),
        ("num_train_epochs", 0, "num_train_epochs=0 is invalid: expected a finite number > 0."),
        ("per_device_eval_batch_size", 0, "per_device_eval_batch_size=0 is invalid: expected an integer >= 1."),
        ("gradient_accumulation_steps", 0, "gradient_accumulation_steps=0 is invalid: expected an integer >= 1."),
        ("learning_rate", INF, "learning_rate=inf is invalid: expected a finite number >= 0."),
        ("learning_rate", {"a": 1}, "learning_rate={'a': 1} is invalid"),
        ("temperature", 0.0, "temperature=0.0 is invalid: expected a finite number > 0."),
        ("top_p", 0.0, "top_p=0.0 is invalid: expected a number in (0, 1]."),
        ("top_p", 1.5, "top_p=1.5 is invalid"),
        ("top_k", -2, "top_k=-2 is invalid: expected an integer >= -1."),
        ("min_p", 2.0, "min_p=2.0 is invalid: expected None or a number in [0, 1]."),
        ("repetition_penalty", 0.0, "repetition_penalty=0.0 is invalid"),
        ("epsilon", -0.1, "epsilon=-0.1 is invalid: expected a finite number >= 0."),
        ("epsilon_high", NAN, "epsilon_high=nan is invalid: expected None or a finite number >= 0."),
        ("num_iterations", 0, "num_iterations=0 is invalid: expected an integer >= 1."),
        ("steps_per_generation", 0, "steps_per_generation=0 is invalid: expected None or an integer >= 1."),
        ("generation_batch_size", 0, "generation_batch_size=0 is invalid"),
        ("max_completion_length", None, "max_completion_length=None is invalid: expected an integer >= 1."),
        ("max_completion_length", 2.5, "max_completion_length=2.5 is invalid"),
        ("beta", INF, "beta=inf is invalid"),
        ("adam_beta2", 1.0, "adam_beta2=1.0 is invalid: expected a number in [0, 1)."),
        ("weight_decay", -1.0, "weight_decay=-1.0 is invalid"),
        ("max_grad_norm", NAN, "max_grad_norm=nan is invalid: expected None or a finite number >= 0."),
        ("logging_steps", INF, "logging_steps=inf is invalid: expected a finite number > 0."),
        ("save_steps", 0, "save_steps=0 is invalid"),
        ("seed", -1, "seed=-1 is invalid: expected an integer in [0, 4294967295]."),
        ("dataloader_num_workers", -1, "dataloader_num_workers=-1 is invalid"),
        ("vllm_server_port", 70000, "vllm_server_port=70000 is invalid: expected an integer in [1, 65535]."),
        ("vllm_gpu_memory_utilization", 0.0, "vllm_gpu_memory_utilization=0.0 is invalid"),
        ("top_entropy_quantile", 1.5, "top_entropy_quantile=1.5 is invalid"),
        ("ref_model_sync_steps", 0, "ref_model_sync_steps=0 is invalid"),
        ("entropy_coef", NAN, "entropy_coef=nan is invalid: expected a finite number."),
        # Our controller fields: infinity and NaN used to pass the config and stop the controller
        ("maxent_tau_lr", INF, "maxent_tau_lr=inf is invalid: expected a finite number > 0."),
        ("maxent_tau_min", NAN, "maxent_tau_min=nan is invalid: expected a finite number >= 0."),
        ("maxent_tau_max", INF, "maxent_tau_max=inf is invalid"),
        ("maxent_target_weight_entropy", INF, "maxent_target_weight_entropy=inf is invalid"),
        ("maxent_tau_warmup_steps", NAN, "maxent_tau_warmup_steps=nan is invalid: expected an integer >= 0."),
        ("kl_horizon", INF, "kl_horizon=inf is invalid"),
        ("maxent_mode_coverage_threshold", NAN, "maxent_mode_coverage_threshold=nan is invalid"),
        ("generation_max_retries", 1.5, "generation_max_retries=1.5 is invalid"),
        ("vllm_request_timeout", INF, "vllm_request_timeout=inf is invalid"),
        # A mapping, a boolean or None where a number belongs
        ("maxent_tau", None, "maxent_tau=None is invalid: expected a finite number >= 0."),
        ("maxent_tau", {"a": 1}, "maxent_tau={'a': 1} is invalid"),
        ("kl_ctl_step_size", None, "kl_ctl_step_size=None is invalid: expected a number in (0, 1]."),
        ("vllm_request_attempts", True, "vllm_request_attempts=True is invalid: expected an integer >= 1."),
        ("reward_weights", [1.0, NAN], "reward_weights=[1.0, nan] is invalid: expected None or a list of finite"),
    ],
)
def test_every_numeric_field_is_checked_when_the_config_is_built(field, value, message):
    with pytest.raises(ValueError) as error:
        MaxEntGRPOConfig(**{**BASE, field: value})
    assert message in str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("field", sorted(FIELD_RANGES))
def test_a_mapping_is_refused_by_every_checked_field(field):
    with pytest.raises(ValueError, match=rf"^{field}=\{{'a': 1\}} is invalid: expected "):
        MaxEntGRPOConfig(**{**BASE, field: {"a": 1}})


def test_edge_values_inside_the_ranges_pass():
    edges = {"max_steps": 1, "num_generations": 2, "top_p": 1.0, "top_k": -1, "learning_rate": 0.0, "seed": 0,
             "maxent_tau": 0.0, "maxent_tau_final": None, "maxent_q_epsilon": 0.0, "kl_ctl_step_size": 1.0,
             "generation_max_retries": 0, "max_grad_norm": None}  # fmt: skip
    config = MaxEntGRPOConfig(**{**BASE, **edges})
    assert (config.max_steps, config.num_generations, config.top_k) == (1, 2, -1)
    assert MaxEntGRPOConfig(**BASE).max_steps == -1  # -1: train for num_train_epochs


def test_cross_field_rules():
    with pytest.raises(ValueError, match=r"maxent_tau_max=0.1 is invalid: expected a number >= maxent_tau_min"):
        MaxEntGRPOConfig(**BASE, maxent_tau_min=1.0, maxent_tau_max=0.1)
    with pytest.raises(ValueError, match=r"entropy_coef_max=0.1 is invalid: expected a number >= entropy_coef_min"):
        MaxEntGRPOConfig(**BASE, entropy_coef_min=0.5, entropy_coef_max=0.1)
    with pytest.raises(ValueError, match=r"beta=0.0 is invalid.*kl_target"):
        MaxEntGRPOConfig(**BASE, beta=0.0, kl_target=0.1)
    with pytest.raises(ValueError, match=r"maxent_tau=5.0 is invalid.*maxent_target_weight_entropy"):
        MaxEntGRPOConfig(
            **BASE, maxent_tau=5.0, maxent_tau_final=None, maxent_tau_max=2.0, maxent_target_weight_entropy=1.0
        )
    with pytest.raises(ValueError, match=r"maxent_tau_final=0.0 is invalid: expected None or a finite number > 0"):
        MaxEntGRPOConfig(**BASE, maxent_tau_final=0.0)
    with pytest.raises(ValueError, match=r"maxent_tau=0.0 is invalid.*maxent_tau_final"):
        MaxEntGRPOConfig(**BASE, maxent_tau=0.0, maxent_tau_final=0.1)
    with pytest.raises(ValueError, match=r"maxent_tau_final=0.1 is invalid.*maxent_target_weight_entropy"):
        MaxEntGRPOConfig(**BASE, maxent_tau_final=0.1, maxent_target_weight_entropy=1.0)
    with pytest.raises(ValueError, match=r"maxent_mode_probability='policy' is invalid: expected 'count' when maxent"):
        MaxEntGRPOConfig(**BASE, maxent_mode_probability="policy")


def test_the_default_listwise_objective_anneals_tau_from_0_25_to_0_003_over_the_whole_run():
    config = MaxEntGRPOConfig(**BASE, maxent_objective="listwise", maxent_mode_key="last_line")
    assert (config.maxent_tau, config.maxent_tau_final, config.maxent_tau_anneal_fraction) == (0.25, 0.003, 1.0)
    assert (config.maxent_mode_probability, config.maxent_q_temperature, config.maxent_q_epsilon) == (
        "count",
        1.0,
        0.0,
    )
    fixed = MaxEntGRPOConfig(**BASE, maxent_tau=0.0, maxent_tau_final=None, maxent_target_weight_entropy=None)
    assert (fixed.maxent_tau, fixed.maxent_tau_final) == (0.0, None)
    assert MaxEntGRPOConfig(**BASE, maxent_tau_final=None, maxent_target_weight_entropy=1.0).maxent_tau == 0.25


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


SERVER = {**BASE, "use_vllm": True, "vllm_mode": "server"}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({}, "use_vllm=True and vllm_mode='server'"),
        ({"use_vllm": True, "vllm_mode": "colocate"}, "colocated vLLM and transformers generation share"),
        ({**SERVER, "vllm_importance_sampling_correction": False}, "vllm_importance_sampling_correction=True"),
        ({**SERVER, "vllm_weight_transfer": "nccl"}, "only the disk transport versions the weights"),
        ({**SERVER, "max_staleness": 0}, "max_staleness=0 is invalid: expected an integer >= 1"),
    ],
)
def test_async_generation_is_refused_where_it_cannot_hold(overrides, message):
    with pytest.raises(ValueError, match=message):
        MaxEntGRPOConfig(**{**BASE, **overrides, "async_generation": True})


def test_async_generation_is_off_by_default_and_accepted_in_server_mode_with_the_disk_transport():
    assert MaxEntGRPOConfig(**BASE).async_generation is False
    config = MaxEntGRPOConfig(**SERVER, async_generation=True, vllm_weight_transfer="disk", max_staleness=2)
    assert config.async_generation and config.max_staleness == 2


TWO_SERVERS = ["http://gen0:8000", "http://gen1:8000/"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"vllm_server_base_urls": []}, "a non-empty list of http:// or https:// URLs"),
        ({"vllm_server_base_urls": ["gen0:8000"]}, "'gen0:8000' is not one"),
        ({"vllm_server_base_urls": ["http://gen0:8000", "http://gen0:8000/"]}, "each server once"),
        (
            {"vllm_server_base_urls": ["http://127.0.0.1:8000", "http://gen1:8000", "http://LOCALHOST:8000//"]},
            r"each server once \('http://127.0.0.1:8000' and 'http://LOCALHOST:8000//' reach the same one\)",
        ),
        ({"vllm_server_base_urls": ["https://gen0", "https://gen0:443/"]}, "each server once"),
        ({"vllm_server_base_urls": TWO_SERVERS, "vllm_server_base_url": "http://gen1:8000"}, "give one of the two"),
        ({"vllm_server_base_urls": TWO_SERVERS, "vllm_weight_transfer": "nccl"}, "NCCL push reaches one server"),
    ],
)
def test_several_servers_are_refused_where_they_cannot_work(overrides, message):
    with pytest.raises(ValueError, match=rf"^vllm_server_base_urls=.* is invalid: expected .*{message}"):
        MaxEntGRPOConfig(**{**SERVER, **overrides})


def test_servers_that_differ_in_port_path_or_scheme_are_different_servers():
    urls = ["http://127.0.0.1:8000", "http://127.0.0.1:8001", "https://127.0.0.1:8000", "http://127.0.0.1:8000/v2"]
    assert MaxEntGRPOConfig(**SERVER, vllm_server_base_urls=urls).vllm_server_base_urls == urls


def test_several_servers_resolve_auto_to_the_disk_transport_and_trl_talks_to_the_first(monkeypatch):
    from maxent_grpo.training.generation.backends.selection import server_urls, weight_transfer_name

    config = MaxEntGRPOConfig(**SERVER, vllm_server_base_urls=TWO_SERVERS)
    single = MaxEntGRPOConfig(**SERVER, vllm_server_base_url="http://gen0:8000")
    assert server_urls(config) == ["http://gen0:8000", "http://gen1:8000"]
    assert config.vllm_server_base_url == "http://gen0:8000"  # TRL's own client, built with the trainer
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)  # a GPU trainer: 'auto' means NCCL for one server
    config.use_cpu = single.use_cpu = False
    assert weight_transfer_name(single) == "nccl"
    assert weight_transfer_name(config) == "disk"
    # What the config's saved form holds (both fields, the single one the list's first) builds the same config.
    again = MaxEntGRPOConfig(**SERVER, vllm_server_base_urls=TWO_SERVERS, vllm_server_base_url="http://gen0:8000")
    assert server_urls(again) == server_urls(config)
    assert server_urls(single) == ["http://gen0:8000"] and single.vllm_server_base_urls is None


@pytest.mark.parametrize(
    ("field", "typo", "closest"),
    [
        # TRL's own string fields, which TRL checks only at the first loss (a traceback) or never (runs as colocate)
        ("loss_type", "dapoo", "dapo"),
        ("vllm_mode", "colocat", "colocate"),
        ("vllm_model_impl", "vlm", "vllm"),
        ("importance_sampling_level", "sequense", "sequence"),
        ("multi_objective_aggregation", "sum_then_normalise", "sum_then_normalize"),
        ("scale_rewards", "grup", "group"),
        ("vllm_importance_sampling_mode", "sequence_masks", "sequence_mask"),
        # transformers' enum and choice fields
        ("eval_strategy", "stepz", "steps"),
        ("lr_scheduler_type", "cosin", "cosine"),
        ("log_level", "inf", "info"),
        ("ddp_backend", "glo", "gloo"),
        # ours
        ("vllm_weight_transfer", "dsk", "disk"),
        ("vllm_dtype", "bfloat", "bfloat16"),
        ("maxent_objective", "listwize", "listwise"),
        ("maxent_mode_probability", "polcy", "policy"),
        ("tool_error_policy", "retyr", "retry"),
        ("dynamic_sampling_at_cap", "eror", "error"),
    ],
)
def test_a_typo_in_an_enum_field_is_one_line_naming_the_closest_choice(field, typo, closest):
    with pytest.raises(ValueError) as error:
        MaxEntGRPOConfig(**{**BASE, field: typo})
    message = str(error.value)
    assert message.startswith(f"{field}={typo!r} is invalid: expected ")
    assert message.endswith(f"; did you mean {closest!r}?") and "\n" not in message


def test_every_enum_like_field_is_checked_against_its_choices():
    checked = field_choices(MaxEntGRPOConfig)
    expected = {
        *("loss_type", "vllm_mode", "vllm_model_impl", "importance_sampling_level", "multi_objective_aggregation"),
        *("scale_rewards", "vllm_importance_sampling_mode", "vllm_weight_transfer", "vllm_dtype", "tool_error_policy"),
        *("dynamic_sampling_at_cap", "maxent_objective", "maxent_mode_probability", "eval_strategy", "save_strategy"),
        *("logging_strategy", "lr_scheduler_type", "optim", "hub_strategy", "log_level", "ddp_backend"),
    }
    assert expected <= set(checked)
    for field in checked:
        with pytest.raises(ValueError, match=rf"^{field}='zzz' is invalid: expected (None or )?one of \("):
            MaxEntGRPOConfig(**{**BASE, field: "zzz"})


def test_enum_members_none_defaults_and_scale_rewards_booleans_pass():
    config = MaxEntGRPOConfig(**BASE, eval_strategy=IntervalStrategy.STEPS, eval_steps=1, scale_rewards=False)
    assert (config.eval_strategy, config.scale_rewards, config.ddp_backend) == ("steps", "none", None)
    with pytest.raises(ValueError, match=r"^importance_sampling_level=1 is invalid: expected one of \('token'"):
        MaxEntGRPOConfig(**BASE, importance_sampling_level=1)


def test_a_plain_grpo_config_with_an_unknown_loss_type_is_refused_when_converted():
    plain = GRPOConfig(**BASE, loss_type="dapoo")  # TRL takes it
    with pytest.raises(ValueError, match=r"loss_type='dapoo' is invalid: .*; did you mean 'dapo'\?$"):
        maxent_config_from(plain, "unused")


def test_the_tau_controller_drops_the_default_anneal_with_a_log_line(caplog):
    with caplog.at_level(logging.INFO, logger="maxent_grpo.config"):
        config = MaxEntGRPOConfig(**BASE, maxent_target_weight_entropy=1.0)
    assert (config.maxent_tau, config.maxent_tau_final) == (0.25, None)
    assert "maxent_tau_final: its default 0.003 is dropped for None" in caplog.text
    assert "maxent_target_weight_entropy=1.0 turns the tau controller on" in caplog.text


def test_a_fixed_tau_of_0_drops_the_default_anneal(caplog):
    with caplog.at_level(logging.INFO, logger="maxent_grpo.config"):
        config = MaxEntGRPOConfig(**BASE, maxent_tau=0.0)
    assert (config.maxent_tau, config.maxent_tau_final) == (0.0, None)
    assert "maxent_tau_final: its default 0.003 is dropped" in caplog.text


def test_the_tau_controller_starts_a_default_tau_inside_the_clamp_the_user_set(caplog):
    with caplog.at_level(logging.INFO, logger="maxent_grpo.config"):
        config = MaxEntGRPOConfig(**BASE, maxent_target_weight_entropy=1.0, maxent_tau_max=0.1)
    assert (config.maxent_tau, config.maxent_tau_final) == (0.1, None)
    assert "maxent_tau: its default 0.25 is dropped for 0.1" in caplog.text


def test_fields_the_user_set_still_conflict():
    with pytest.raises(ValueError, match=r"maxent_tau_final=0.1 is invalid.*maxent_target_weight_entropy"):
        MaxEntGRPOConfig(**BASE, maxent_tau_final=0.1, maxent_target_weight_entropy=1.0)
    with pytest.raises(ValueError, match=r"maxent_tau=0.5 is invalid.*maxent_target_weight_entropy"):
        MaxEntGRPOConfig(**BASE, maxent_tau=0.5, maxent_tau_max=0.1, maxent_target_weight_entropy=1.0)


@pytest.mark.parametrize(
    ("overrides", "terms"),
    [
        ({}, "per_device_train_batch_size x gradient_accumulation_steps x processes (4 x 1 x 1 = 4)"),
        ({"gradient_accumulation_steps": 2},
         "per_device_train_batch_size x gradient_accumulation_steps x processes (4 x 2 x 1 = 8)"),
        ({"steps_per_generation": 2},
         "per_device_train_batch_size x steps_per_generation x processes (4 x 2 x 1 = 8)"),
        ({"generation_batch_size": 8}, "generation_batch_size (8)"),
    ],
)  # fmt: skip
def test_num_generations_that_does_not_divide_the_batch_names_the_fields_the_user_set(overrides, terms):
    with pytest.raises(ValueError) as error:
        MaxEntGRPOConfig(**{**BASE, "num_generations": 3, **overrides})
    message = str(error.value)
    assert message.startswith(f"{terms} must be divisible by num_generations (3): ")
    named = {"generation_batch_size", "steps_per_generation"} & set(overrides)
    for field in {"generation_batch_size", "steps_per_generation"} - named:
        assert field not in message


def test_generation_batch_terms_of_a_config_name_what_the_user_set():
    assert MaxEntGRPOConfig(**BASE).generation_batch_terms() == (
        "per_device_train_batch_size x gradient_accumulation_steps x processes (4 x 1 x 1 = 4)",
        ["per_device_train_batch_size", "gradient_accumulation_steps"],
    )
    assert MaxEntGRPOConfig(**BASE, generation_batch_size=8).generation_batch_terms()[1] == ["generation_batch_size"]
    converted = maxent_config_from(GRPOConfig(**BASE, steps_per_generation=2), "unused")
    assert converted.generation_batch_terms()[0].startswith("per_device_train_batch_size x steps_per_generation")


def test_the_server_key_is_never_in_the_printed_or_logged_config(tmp_path, monkeypatch):
    from maxent_grpo.training.generation.backends.selection import server_api_key

    config = MaxEntGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", vllm_server_api_key="k3y-42")
    assert server_api_key(config) == "k3y-42"  # what the trainer sends
    for shown in (str(config), repr(config), config.to_json_string(), str(config.to_sanitized_dict())):
        assert "k3y-42" not in shown and "<VLLM_SERVER_API_KEY>" in shown
    monkeypatch.setenv("VLLM_API_KEY", "from-env")
    assert server_api_key(config) == "k3y-42"  # the field wins over vLLM's variable
    unset = MaxEntGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    assert server_api_key(unset) == "from-env" and unset.to_dict()["vllm_server_api_key"] is None
    monkeypatch.delenv("VLLM_API_KEY")
    assert server_api_key(unset) is None


@pytest.mark.parametrize(
    ("fields", "bf16"),
    [
        ({"use_cpu": True, "use_vllm": True}, False),  # the engine samples in float32 on the CPU: so does the trainer
        ({"use_cpu": True, "use_vllm": True, "bf16": True}, True),  # set explicitly: kept
        ({"use_cpu": True, "use_vllm": True, "fp16": True}, False),  # fp16 asked for: TRL's rule
        ({"use_cpu": True}, True),  # no engine: TRL's default
    ],
)
def test_bf16_defaults_off_on_the_cpu_with_a_vllm_engine(tmp_path, fields, bf16):
    config = MaxEntGRPOConfig(output_dir=str(tmp_path), report_to="none", **fields)
    assert config.bf16 is bf16
    stock = GRPOConfig(output_dir=str(tmp_path), report_to="none", **fields)
    assert stock.bf16 is (not fields.get("fp16", False) if "bf16" not in fields else fields["bf16"])
