"""What `maxent-grpo train` prints once the model is saved: the watched figures at the start and the end, where the
model, the metrics and the trackio project are, and the command to run next (as the demo ends)."""

from __future__ import annotations

from maxent_grpo.cli.line_progress import WATCHED, WatchedProgress, format_seconds
from maxent_grpo.cli.metrics_file import metrics_path
from maxent_grpo.cli.trackio_show import show_command

#: The next step after training the tiny offline model, a real model on GPUs.
GPU_GUIDE = "docs/guide/gpus.md"


def summary(
    progress: WatchedProgress,
    *,
    steps: int,
    output_dir: str,
    trackio_project: str | None,
    tiny_model: bool,
) -> str:
    """The summary lines of a run whose progress `progress` watched.

    Args:
        progress: the run's progress callback (its first and last values of the watched figures, its time).
        steps: optimizer steps the run ended at.
        output_dir: where the model was saved.
        trackio_project: the trackio project the run logged to, or None (not logged with trackio).
        tiny_model: the run trained the tiny offline model (the next step is then a real model).
    """
    lines = [f"Trained {steps} steps in {format_seconds(progress.seconds)}."]
    for key, label in WATCHED:
        if key in progress.first:
            (first_step, first), (last_step, last) = progress.first[key], progress.last[key]
            lines.append(f"  {label}: {first:.3g} at step {first_step} -> {last:.3g} at step {last_step}")
    lines.append(f"Model: {output_dir}")
    lines.append(f"Every logged figure: {metrics_path(output_dir)} (one JSON line per log)")
    if trackio_project is not None:
        lines.append(f"trackio: {show_command(trackio_project)}")
    if tiny_model:
        lines.append(f"Next, a real model on two GPUs, a vLLM server on one and the trainer on the other: {GPU_GUIDE}")
    else:
        lines.append(f"Next, generate with the trained model: maxent-grpo vllm-serve {output_dir}")
    return "\n".join(lines)
