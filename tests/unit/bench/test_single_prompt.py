"""The shared pieces of the single-prompt benchmarks: config overrides from the command line and the step record."""

from __future__ import annotations

import argparse

import pytest

from maxent_grpo.bench.single_prompt import StepRecorder, add_run_arguments, maxent_override


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
    from maxent_grpo.bench.single_prompt import smooth

    assert smooth([1.0, 2.0, 3.0, 4.0], 2) == [1.0, 1.5, 2.5, 3.5]
    assert smooth([], 3) == []


def test_maxent_run_settings_record_the_config_defaults_under_the_tasks_settings_and_overrides() -> None:
    from maxent_grpo.bench.single_prompt import SinglePromptTask

    task = SinglePromptTask(prompt="10=", mode_key="last_line", maxent_settings={"maxent_mode_probability": "policy"})
    assert task.maxent_run_settings({"maxent_tau_final": None}) == {
        "maxent_mode_key": "last_line",
        "maxent_tau": 0.25,
        "maxent_tau_final": None,
        "maxent_tau_anneal_fraction": 1.0,
        "maxent_q_temperature": 1.0,
        "maxent_q_epsilon": 0.0,
        "maxent_mode_probability": "policy",
    }
