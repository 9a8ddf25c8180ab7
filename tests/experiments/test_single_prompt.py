"""The shared pieces of the single-prompt benchmarks: config overrides, the step record, the arms and their order."""

from __future__ import annotations

import argparse

import pytest

from maxent_grpo_experiments.config_override import maxent_override
from maxent_grpo_experiments.single_prompt import add_run_arguments
from maxent_grpo_experiments.step_recorder import StepRecorder


def test_maxent_override_reads_json_values_and_falls_back_to_text() -> None:
    assert maxent_override("maxent_tau=0.5") == ("maxent_tau", 0.5)
    assert maxent_override("maxent_tau_final=null") == ("maxent_tau_final", None)
    assert maxent_override("maxent_mode_key=last_line") == ("maxent_mode_key", "last_line")
    for item in ("maxent_tau", "=0.5"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected FIELD=VALUE"):
            maxent_override(item)


def test_run_arguments_collect_repeated_overrides() -> None:
    parser = argparse.ArgumentParser()
    add_run_arguments(parser, maxent_help="override")
    args = parser.parse_args(["--steps", "5", "--maxent", "maxent_tau=1", "--maxent", "maxent_q_epsilon=0.1"])
    assert (args.steps, args.seeds) == (5, 3)
    assert dict(args.maxent) == {"maxent_tau": 1, "maxent_q_epsilon": 0.1}


def test_step_recorder_records_mean_reward_and_group_metrics() -> None:
    def starts_with_a(completions: list, **kwargs: object) -> list[float]:
        return [float(c.startswith("a")) for c in completions]

    recorder = StepRecorder(starts_with_a, {"distinct": lambda completions: float(len(set(completions)))})
    assert recorder.__name__ == "starts_with_a"
    assert recorder(["a", "b", "a", "c"], prompts=["p"] * 4) == [1.0, 0.0, 1.0, 0.0]
    assert recorder(["a", "a"]) == [1.0, 1.0]
    assert recorder.rewards == [0.5, 1.0]
    assert recorder.metrics == {"distinct": [3.0, 1.0]}


def test_smooth_is_a_trailing_moving_average() -> None:
    from maxent_grpo_experiments.smoothing import smooth

    assert smooth([1.0, 2.0, 3.0, 4.0], 2) == [1.0, 1.5, 2.5, 3.5]
    assert smooth([], 3) == []


def test_maxent_run_settings_record_the_config_defaults_under_the_tasks_settings_and_overrides() -> None:
    from maxent_grpo.single_prompt_task import SinglePromptTask
    from maxent_grpo_experiments.single_prompt import maxent_run_settings

    task = SinglePromptTask(prompt="10=", mode_key="last_line", maxent_settings={"maxent_mode_probability": "policy"})
    assert maxent_run_settings(task, {"maxent_tau_final": None}) == {
        "maxent_mode_key": "last_line",
        "maxent_tau": 0.25,
        "maxent_tau_final": None,
        "maxent_tau_anneal_fraction": 1.0,
        "maxent_q_temperature": 1.0,
        "maxent_q_epsilon": 0.0,
        "maxent_mode_probability": "policy",
    }


def test_arms_are_the_trl_methods_then_maxent_and_name_their_trainer() -> None:
    from maxent_grpo_experiments.trl_baselines import ARMS, arm_fields, trainer_kind, trl_methods

    assert (*trl_methods(0.05), "maxent") == ARMS
    assert [trainer_kind(m) for m in ARMS] == ["grpo", "grpo", "grpo", "grpo", "maxent"]
    with pytest.raises(ValueError, match="unknown method"):
        trainer_kind("ppo")
    assert arm_fields("grpo_entropy_fixed", 0.02) == {"entropy_coef": 0.02}
    assert arm_fields("grpo_top_entropy") == {"top_entropy_quantile": 0.2}
    assert arm_fields("grpo") == arm_fields("maxent") == {}
    with pytest.raises(ValueError, match="its fixed coefficient"):
        arm_fields("grpo_entropy_fixed")
    with pytest.raises(ValueError, match="unknown arm"):
        arm_fields("grpo_other")


def test_arm_arguments_order_the_methods_and_check_the_grid() -> None:
    from maxent_grpo_experiments.single_prompt import add_arm_arguments, selected_methods
    from maxent_grpo_experiments.trl_baselines import ARMS, FIXED_ENTROPY_GRID

    parser = argparse.ArgumentParser()
    add_arm_arguments(parser)
    defaults = parser.parse_args([])
    assert (defaults.methods, defaults.entropy_grid) == (list(ARMS), list(FIXED_ENTROPY_GRID))
    args = parser.parse_args(["--methods", "maxent", "grpo", "--entropy-grid", "0.5", "0.02"])
    assert selected_methods(args.methods) == ("grpo", "maxent") and args.entropy_grid == [0.5, 0.02]
    for bad in (["--entropy-grid", "0"], ["--entropy-grid", "x"], ["--methods", "ppo"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)
    with pytest.raises(ValueError, match="needs grpo"):
        selected_methods(["grpo_entropy_fixed", "maxent"])
    with pytest.raises(ValueError, match="non-empty selection"):
        selected_methods([])


def test_build_trainer_adds_the_trl_fields_to_the_arms_trainer(tmp_path) -> None:
    from trl import GRPOTrainer

    from maxent_grpo.single_prompt_task import SinglePromptTask
    from maxent_grpo.trainer import MaxEntGRPOTrainer
    from maxent_grpo_experiments.trl_baselines import arm_fields, trainer_kind

    task = SinglePromptTask(prompt="pick a vowel:", mode_key="first_token")
    recorder = StepRecorder(lambda completions, **kwargs: [0.0] * len(completions))
    fixed = task.build_trainer(
        trainer_kind("grpo_entropy_fixed"),
        0,
        2,
        {},
        str(tmp_path),
        recorder,
        trl_fields=arm_fields("grpo_entropy_fixed", 0.05),
    )
    assert type(fixed) is GRPOTrainer and fixed.args.entropy_coef == 0.05
    maxent = task.build_trainer("maxent", 0, 2, {"maxent_tau": 0.5}, str(tmp_path), recorder)
    assert isinstance(maxent, MaxEntGRPOTrainer) and maxent.args.entropy_coef == 0.0 and maxent.args.maxent_tau == 0.5


def _fake_train(calls: list):
    """A `run_arms` train callback whose figures depend on the arm and its coefficient only, recording its calls."""

    def train(method, seed, trl_fields):
        calls.append((method, seed, dict(trl_fields)))
        coefficient = trl_fields.get("entropy_coef", 0.0) if method == "grpo_entropy_fixed" else 0.0
        reward = {"grpo": 1.0, "maxent": 0.995}.get(method, 1.0 - coefficient)  # 0.1 costs 0.1 of reward
        diversity = {"grpo": 0.1, "maxent": 1.0}.get(method, coefficient * 5 + seed * 0.01)
        return {"mean_reward": reward, "diversity": diversity}, {"reward": [reward] * 3}

    return train


def test_run_arms_trains_the_grid_first_then_the_other_arms_per_seed_and_reuses_the_chosen_runs(capsys) -> None:
    from maxent_grpo_experiments.per_seed_comparison import compare_with_maxent, comparison_lines
    from maxent_grpo_experiments.single_prompt_arms import run_arms
    from maxent_grpo_experiments.trl_baselines import ADAPTIVE_ENTROPY, ARMS, TOP_ENTROPY

    calls: list = []
    arms = run_arms(ARMS, 2, [0.1, 0.005, 0.01], _fake_train(calls), lambda f: "ok", diversity="diversity")

    grid = [("grpo", {})] + [("grpo_entropy_fixed", {"entropy_coef": c}) for c in (0.005, 0.01, 0.1)]
    main = [("grpo_entropy", ADAPTIVE_ENTROPY), ("grpo_top_entropy", TOP_ENTROPY), ("maxent", {})]
    expected = [(m, s, f) for s in (0, 1) for m, f in grid] + [(m, s, f) for s in (0, 1) for m, f in main]
    assert calls == expected
    assert arms.fixed_coefficient == 0.01  # 0.1 is more diverse but 0.1 below stock GRPO's reward
    assert arms.grpo_reward == 1.0
    assert arms.entropy_grid[0.1] == {"mean_reward": 0.9, "diversity": pytest.approx(0.505), "admissible": False}
    assert arms.entropy_grid[0.01]["admissible"] and arms.entropy_grid[0.005]["admissible"]
    assert [(r.method, r.seed, r.phase) for r in arms.runs] == [
        (m, s, "grid" if m in ("grpo", "grpo_entropy_fixed") else "main") for s in (0, 1) for m in ARMS
    ]
    fixed = [r for r in arms.runs if r.method == "grpo_entropy_fixed"]
    assert all(r.entropy_coef == 0.01 and r in arms.grid_runs for r in fixed)
    assert len(arms.grid_runs) == 6 and len(calls) == 2 * 4 + 2 * 3
    assert fixed[0].record() == {
        "method": "grpo_entropy_fixed",
        "seed": 0,
        "phase": "grid",
        "seconds": round(fixed[0].seconds, 1),
        "entropy_coef": 0.01,
        "mean_reward": 0.99,
        "diversity": 0.05,
    }
    output = capsys.readouterr().out
    assert "[14/14] main seed 1 maxent" in output and "<- chosen" in output

    comparisons = compare_with_maxent(arms.runs, {"mean_reward": 0.01, "diversity": 0.05})
    assert list(comparisons) == ["grpo", "grpo_entropy_fixed", "grpo_entropy", "grpo_top_entropy"]
    assert comparisons["grpo"]["mean_reward"] == {"differences": [pytest.approx(-0.005)] * 2, "verdict": "level"}
    assert comparisons["grpo"]["diversity"]["verdict"] == "ahead"
    lines = comparison_lines(
        comparisons,
        {m: m.upper() for m in ARMS},
        {"mean_reward": "reward", "diversity": "d"},
        {"mean_reward": 0.01, "diversity": 0.05},
    )
    assert len(lines) == 5 and "every one of the 2 seed(s)" in lines[0] and "no significance test" in lines[0]
    assert lines[1].startswith("Against GRPO, MaxEnt is level on reward (MaxEnt minus it per seed: -0.005 to -0.005)")


def test_run_arms_without_the_fixed_arm_trains_no_grid() -> None:
    from maxent_grpo_experiments.single_prompt_arms import run_arms

    calls: list = []
    arms = run_arms(["maxent", "grpo"], 1, [0.05], _fake_train(calls), lambda f: "", diversity="diversity")
    assert [(m, s) for m, s, _ in calls] == [("grpo", 0), ("maxent", 0)]
    assert (arms.fixed_coefficient, arms.grpo_reward, arms.entropy_grid, arms.grid_runs) == (None, None, {}, [])
    assert [r.phase for r in arms.runs] == ["main", "main"]


def test_per_seed_verdict_needs_every_seed_past_the_margin() -> None:
    from maxent_grpo_experiments.per_seed_comparison import compare_with_maxent, comparison_lines, per_seed_verdict

    assert per_seed_verdict([0.2, 0.06], 0.05) == "ahead"
    assert per_seed_verdict([-0.2, -0.06], 0.05) == "behind"
    level = (per_seed_verdict([0.2, 0.04], 0.05), per_seed_verdict([0.2, -0.2], 0.05), per_seed_verdict([0.0], 0.0))
    assert level == ("level",) * 3
    with pytest.raises(ValueError, match="at least one difference"):
        per_seed_verdict([], 0.05)
    assert compare_with_maxent([], {"mean_reward": 0.01}) == {}
    assert comparison_lines({}, {}, {}, {}) == []
