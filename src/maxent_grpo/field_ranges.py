"""The allowed value of every numeric field of `MaxEntGRPOConfig`: its own, and those of TRL's `GRPOConfig` and
transformers' `TrainingArguments` that training relies on.

TRL and torch check many of these only once training has started (``num_generations=0`` is a ZeroDivisionError in
`GRPOConfig.__post_init__`, ``temperature=0`` a division by zero at the first generation), or never
(``max_steps=0`` trains one step at learning rate 0). `check_field_ranges` checks them all when the config is built,
before TRL derives anything from them, and names the field, the value and the allowed range in one line.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

_SEED_MAX = 2**32 - 1  # numpy's seeds
_PORT_MAX = 65535


@dataclass(frozen=True)
class Range:
    """An allowed range: integers or finite numbers between ``low`` and ``high`` (either may be open), optionally
    None, plus ``also`` (exact values with a meaning of their own, such as ``max_steps=-1``)."""

    integer: bool = False
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    optional: bool = False
    also: tuple[int, ...] = ()

    def allows(self, value: Any) -> bool:
        if value is None:
            return self.optional
        if isinstance(value, bool) or not isinstance(value, numbers.Integral if self.integer else numbers.Real):
            return False
        if value in self.also:
            return True
        if not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def describe(self) -> str:
        kind = (
            "an integer"
            if self.integer
            else "a number"
            if self.low is not None and self.high is not None
            else "a finite number"
        )
        if self.low is not None and self.high is not None:
            text = f"{kind} in {'(' if self.low_open else '['}{self.low}, {self.high}{')' if self.high_open else ']'}"
        elif self.low is not None:
            text = f"{kind} {'>' if self.low_open else '>='} {self.low}"
        elif self.high is not None:
            text = f"{kind} {'<' if self.high_open else '<='} {self.high}"
        else:
            text = kind
        others = [*(["None"] if self.optional else []), *(str(value) for value in self.also)]
        return f"{' or '.join(others)} or {text}" if others else text


def _count(low: int, high: int | None = None, *, optional: bool = False, also: tuple[int, ...] = ()) -> Range:
    return Range(integer=True, low=low, high=high, optional=optional, also=also)


def _number(low: float | None = None, *, above: bool = False, optional: bool = False) -> Range:
    """A finite number, ``>= low`` (``> low`` with ``above``)."""
    return Range(low=low, low_open=above, optional=optional)


def _within(low: float, high: float, brackets: str = "[]", *, optional: bool = False) -> Range:
    return Range(low=low, high=high, low_open=brackets[0] == "(", high_open=brackets[1] == ")", optional=optional)


FIELD_RANGES: dict[str, Range] = {
    # transformers' TrainingArguments
    "per_device_train_batch_size": _count(1),
    "per_device_eval_batch_size": _count(1),
    "gradient_accumulation_steps": _count(1),
    "eval_accumulation_steps": _count(1, optional=True),
    "num_train_epochs": _number(0, above=True),
    "max_steps": _count(1, also=(-1,)),
    "learning_rate": _number(0),
    "warmup_steps": _number(0),
    "weight_decay": _number(0),
    "adam_beta1": _within(0, 1, "[)"),
    "adam_beta2": _within(0, 1, "[)"),
    "adam_epsilon": _number(0),
    "max_grad_norm": _number(0, optional=True),
    "logging_steps": _number(0, above=True),
    "save_steps": _number(0, above=True),
    "eval_steps": _number(0, above=True, optional=True),
    "save_total_limit": _count(0, optional=True),
    "seed": _count(0, _SEED_MAX),
    "data_seed": _count(0, _SEED_MAX, optional=True),
    "dataloader_num_workers": _count(0),
    "ddp_timeout": _count(1),
    # TRL's GRPOConfig
    "num_generations": _count(2),
    "num_generations_eval": _count(1, optional=True),
    "max_completion_length": _count(1),
    "generation_batch_size": _count(1, optional=True),
    "steps_per_generation": _count(1, optional=True),
    "temperature": _number(0, above=True),
    "top_p": _within(0, 1, "(]"),
    "top_k": _count(-1),
    "min_p": _within(0, 1, optional=True),
    "repetition_penalty": _number(0, above=True),
    "vllm_server_port": _count(1, _PORT_MAX),
    "vllm_group_port": _count(1, _PORT_MAX),
    "vllm_server_timeout": _number(0, above=True),
    "vllm_gpu_memory_utilization": _within(0, 1, "(]"),
    "vllm_max_model_length": _count(1, optional=True),
    "vllm_tensor_parallel_size": _count(1),
    "beta": _number(0),
    "num_iterations": _count(1),
    "epsilon": _number(0),
    "epsilon_high": _number(0, optional=True),
    "delta": _number(0, above=True, optional=True),
    "sapo_temperature_neg": _number(0, above=True),
    "sapo_temperature_pos": _number(0, above=True),
    "vespo_k_pos": _number(0),
    "vespo_lambda_pos": _number(0),
    "vespo_k_neg": _number(0),
    "vespo_lambda_neg": _number(0),
    "ref_model_mixup_alpha": _within(0, 1),
    "ref_model_sync_steps": _count(1),
    "top_entropy_quantile": _within(0, 1),
    "entropy_coef": _number(),
    "entropy_coef_min": _number(0),
    "entropy_coef_max": _number(0),
    "entropy_coef_delta": _number(0, above=True),
    "entropy_target": _number(0),
    "max_tool_calling_iterations": _count(1, optional=True),
    "vllm_importance_sampling_clip_max": _number(0, above=True, optional=True),
    "vllm_importance_sampling_clip_min": _number(0, optional=True),
    "vllm_importance_sampling_cap": _number(0, above=True, optional=True),
    "off_policy_mask_threshold": _number(0, above=True, optional=True),
    "num_completions_to_print": _count(0, optional=True),
    "router_aux_loss_coef": _number(0, optional=True),
    # MaxEntGRPOConfig: generation robustness and dynamic sampling
    "generation_max_retries": _count(0, optional=True),
    "generation_max_consecutive_empty_batches": _count(1),
    "generation_step_timeout": _number(0, above=True, optional=True),
    "vllm_request_timeout": _number(0, above=True),
    "vllm_request_attempts": _count(1),
    "max_staleness": _count(1),
    "dynamic_sampling_max_rounds": _count(1),
    "tool_timeout": _number(0, above=True, optional=True),
    "reward_timeout": _number(0, above=True, optional=True),
    "reward_retries": _count(0),
    "reward_max_consecutive_failed_batches": _count(1),
    # MaxEntGRPOConfig: the listwise objective and its controllers
    "maxent_tau": _number(0),
    "maxent_tau_final": _number(0, above=True, optional=True),
    "maxent_tau_anneal_fraction": _within(0, 1, "(]"),
    "maxent_q_temperature": _number(0, above=True),
    "maxent_q_epsilon": _within(0, 1, "[)"),
    "maxent_mode_coverage_threshold": _number(),
    "maxent_mode_correction_clip": _number(1, optional=True),
    "maxent_pass_at_k": _count(1),
    "maxent_positive_scale": _number(0, above=True),
    "maxent_target_weight_entropy": _number(0, optional=True),
    "maxent_tau_lr": _number(0, above=True),
    "maxent_tau_min": _number(0),
    "maxent_tau_max": _number(0),
    "maxent_tau_warmup_steps": _count(0),
    "kl_target": _number(0, above=True, optional=True),
    "kl_horizon": _count(1),
    "kl_ctl_step_size": _within(0, 1, "(]"),
}


def check_field_ranges(config: object) -> None:
    """Raise ValueError ``"<field>=<value> is invalid: expected <range>."`` for the first field of `FIELD_RANGES`
    whose value on ``config`` is out of its range (a wrong type, None where a number belongs, NaN or infinity
    included)."""
    for name, allowed in FIELD_RANGES.items():
        value = getattr(config, name)
        if not allowed.allows(value):
            raise ValueError(f"{name}={value!r} is invalid: expected {allowed.describe()}.")
