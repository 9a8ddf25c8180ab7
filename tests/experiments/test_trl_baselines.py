"""The TRL baselines of the objective benchmarks: their config fields and the choice of the fixed entropy bonus."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trl import GRPOConfig

from maxent_grpo_experiments.trl_baselines import (
    ADAPTIVE_ENTROPY,
    FIXED_ENTROPY_GRID,
    KL_ANCHOR,
    TOP_ENTROPY,
    TRL_LABELS,
    arm_fields,
    choose_fixed_coefficient,
    fixed_entropy,
    trl_methods,
)


def test_trl_methods_are_grpo_keys_with_grpo_config_fields_in_run_order() -> None:
    methods = trl_methods(0.05)
    assert list(methods) == ["grpo", "grpo_entropy_fixed", "grpo_entropy", "grpo_top_entropy"]
    assert [*methods, "grpo_kl"] == list(TRL_LABELS)  # the opt-in KL comparator last
    assert all(method == "grpo" or method.startswith("grpo_") for method in methods)
    assert methods["grpo"] == {} and methods["grpo_entropy_fixed"] == {"entropy_coef": 0.05}
    assert methods["grpo_entropy"] == ADAPTIVE_ENTROPY and methods["grpo_top_entropy"] == TOP_ENTROPY
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    assert all(set(extra) <= fields for extra in methods.values())
    methods["grpo_entropy"]["entropy_coef"] = 1.0  # a copy: the module's constants stay as they are
    assert ADAPTIVE_ENTROPY["entropy_coef"] == 0.01


def test_fixed_entropy_needs_a_positive_coefficient() -> None:
    assert fixed_entropy(1) == {"entropy_coef": 1.0}
    assert all(c > 0 for c in FIXED_ENTROPY_GRID)
    for bad in (0.0, -0.01, float("nan")):
        with pytest.raises(ValueError, match="entropy_coef > 0"):
            fixed_entropy(bad)


def test_choice_is_the_most_diverse_coefficient_within_the_reward_tolerance() -> None:
    reward = {0.01: 0.997, 0.02: 0.995, 0.05: 0.993, 0.1: 0.95}
    diversity = {0.01: 0.3, 0.02: 0.6, 0.05: 0.95, 0.1: 0.99}
    assert choose_fixed_coefficient(diversity, reward, grpo_reward=0.997) == 0.05  # 0.1 costs too much reward
    assert choose_fixed_coefficient(diversity, reward, grpo_reward=0.997, tolerance=0.05) == 0.1
    assert choose_fixed_coefficient(diversity, reward, grpo_reward=0.997, tolerance=0.001) == 0.01


def test_choice_falls_back_to_the_best_reward_and_ties_go_to_the_smaller_coefficient() -> None:
    reward = {0.01: 0.5, 0.02: 0.7, 0.05: 0.7, 0.1: 0.6}
    diversity = {0.01: 0.9, 0.02: 0.1, 0.05: 0.8, 0.1: 1.0}
    assert choose_fixed_coefficient(diversity, reward, grpo_reward=0.99) == 0.02  # none admissible
    level = dict.fromkeys(reward, 0.5)
    assert choose_fixed_coefficient(level, level, grpo_reward=0.5) == 0.01


def test_choice_needs_the_same_non_empty_grid() -> None:
    with pytest.raises(ValueError, match="same non-empty grid"):
        choose_fixed_coefficient({}, {}, grpo_reward=1.0)
    with pytest.raises(ValueError, match="same non-empty grid"):
        choose_fixed_coefficient({0.01: 1.0}, {0.02: 1.0}, grpo_reward=1.0)


unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(
    figures=st.dictionaries(
        st.floats(min_value=1e-4, max_value=1.0, allow_nan=False), st.tuples(unit, unit), min_size=1, max_size=6
    ),
    grpo_reward=unit,
    tolerance=st.floats(min_value=0.0, max_value=0.2, allow_nan=False),
)
def test_choice_is_in_the_grid_and_admissible_when_any_is(
    figures: dict[float, tuple[float, float]], grpo_reward: float, tolerance: float
) -> None:
    diversity = {c: d for c, (d, _) in figures.items()}
    reward = {c: r for c, (_, r) in figures.items()}
    chosen = choose_fixed_coefficient(diversity, reward, grpo_reward, tolerance)
    assert chosen in figures
    admissible = [c for c in figures if reward[c] >= grpo_reward - tolerance]
    if admissible:
        assert chosen in admissible
        best = [c for c in admissible if diversity[c] == max(diversity[a] for a in admissible)]
    else:
        best = [c for c in figures if reward[c] == max(reward.values())]
    assert chosen == min(best)


def test_the_kl_comparator_is_grpo_with_trl_s_beta() -> None:
    assert arm_fields("grpo_kl") == KL_ANCHOR == {"beta": 0.3}
    assert {f.name for f in dataclasses.fields(GRPOConfig)} >= set(KL_ANCHOR)
    with pytest.raises(ValueError, match="unknown arm 'grpo_klx'"):
        arm_fields("grpo_klx")
