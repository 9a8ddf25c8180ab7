"""The dashboard `trackio show` opens after a run: reward and entropy first, TRL's profiling timings last."""

from __future__ import annotations

from trackio.utils import order_metrics_by_plot_preference

from maxent_grpo.cli.trackio_show import PLOT_ORDER, show_command

# Keys a MaxEnt run logs (a sample of each group), in the alphabetical order trackio falls back to.
LOGGED = sorted(
    [
        "completions/mean_length", "entropy", "generation/dropped_prompts", "kl", "loss", "maxent/mode_coverage",
        "maxent/tau", "maxent/weight_entropy", "profiling/Time taken: GRPOTrainer._prepare_inputs",
        "profiling/Time taken: GRPOTrainer.compute_loss", "reward", "reward_std", "rewards/vowel_start_reward/mean",
    ]
)  # fmt: skip


def test_trackio_lays_out_reward_and_entropy_first_and_profiling_last(monkeypatch):
    monkeypatch.setenv("TRACKIO_PLOT_ORDER", PLOT_ORDER)  # as `show_command` sets it for `trackio show`
    groups, charts = order_metrics_by_plot_preference(LOGGED)
    assert groups[:3] == ["charts", "maxent", "rewards"] and groups[-1] == "profiling"
    assert charts["charts"]["direct_metrics"][:2] == ["reward", "entropy"]
    assert charts["maxent"]["direct_metrics"][0] == "maxent/mode_coverage"
    monkeypatch.delenv("TRACKIO_PLOT_ORDER")
    unordered = order_metrics_by_plot_preference(LOGGED)[0]  # without it: alphabetical, profiling before rewards
    assert unordered == sorted(groups) and unordered.index("profiling") < unordered.index("rewards")


def test_the_command_sets_the_order_for_trackio_show_only():
    assert show_command("maxent-grpo-demo") == (
        f"TRACKIO_PLOT_ORDER='{PLOT_ORDER}' trackio show --project maxent-grpo-demo"
    )
