"""What `maxent-grpo train` prints once the model is saved: the watched figures at the start and the end, what the
run wrote and how large (the model, each checkpoint, the metrics), the trackio project, and the next step (as the demo
ends)."""

from __future__ import annotations

from pathlib import Path

from maxent_grpo.cli.line_progress import WATCHED, WatchedProgress, format_seconds
from maxent_grpo.cli.metrics_file import metrics_path
from maxent_grpo.cli.trackio_show import show_command_lines
from maxent_grpo.number_format import byte_size, figure

#: The next step after training the tiny offline model, a real model on GPUs.
GPU_GUIDE = "docs/guide/gpus.md"


def _size(path: Path) -> int:
    """The bytes of the file ``path``, or of every file under the folder ``path``."""
    if path.is_file():
        return path.stat().st_size
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())


def _checkpoints(output_dir: Path) -> list[Path]:
    """The ``checkpoint-<step>`` folders of ``output_dir``, by step."""
    found = [path for path in output_dir.glob("checkpoint-*") if path.is_dir() and path.name[11:].isdigit()]
    return sorted(found, key=lambda path: int(path.name[11:]))


def written(output_dir: str) -> list[str]:
    """What the run left in ``output_dir`` and how large: the folder in all, the final model (its files at the top of
    the folder), each checkpoint (with the optimizer state, to resume from) and the metrics file."""
    folder = Path(output_dir)
    metrics = Path(metrics_path(output_dir))
    checkpoints = _checkpoints(folder)
    model_files = [path for path in folder.iterdir() if path.is_file() and path != metrics]
    lines = [
        f"Written to {output_dir} ({byte_size(_size(folder))} in all):",
        f"  model: {output_dir} ({byte_size(sum(map(_size, model_files)))})",
    ]
    lines += [
        f"  checkpoint, with the optimizer state to resume from: {path} ({byte_size(_size(path))})"
        for path in checkpoints
    ]
    if metrics.is_file():
        lines.append(f"  every logged figure: {metrics} ({byte_size(_size(metrics))}, one JSON line per log)")
    return lines


def next_step(output_dir: str, *, tiny_model: bool, vllm_installed: bool) -> list[str]:
    """What to run next: a real model after the tiny one; else generation with the trained model, with vLLM's server
    where vLLM is installed, else with transformers."""
    if tiny_model:
        return [f"Next, a real model on two GPUs, a vLLM server on one and the trainer on the other: {GPU_GUIDE}"]
    if vllm_installed:
        return [f"Next, generate with the trained model: maxent-grpo vllm-serve {output_dir}"]
    return [
        "Next, generate with the trained model in Python (vllm-serve needs vLLM: pip install 'maxent-grpo[vllm]'):",
        "  from transformers import AutoModelForCausalLM, AutoTokenizer",
        f"  model = AutoModelForCausalLM.from_pretrained({output_dir!r})",
        f"  tokenizer = AutoTokenizer.from_pretrained({output_dir!r})",
    ]


def summary(
    progress: WatchedProgress,
    *,
    steps: int,
    output_dir: str,
    trackio_project: str | None,
    tiny_model: bool,
    vllm_installed: bool,
) -> str:
    """The summary lines of a run whose progress `progress` watched.

    Args:
        progress: the run's progress callback (its first and last values of the watched figures, its time).
        steps: optimizer steps the run ended at.
        output_dir: where the model was saved.
        trackio_project: the trackio project the run logged to, or None (not logged with trackio).
        tiny_model: the run trained the tiny offline model (the next step is then a real model).
        vllm_installed: vLLM can be imported here (the next step may then serve the model with it).
    """
    lines = [f"Trained {steps} step{'' if steps == 1 else 's'} in {format_seconds(progress.seconds)}."]
    for key, label in WATCHED:
        if key in progress.first:
            (first_step, first), (last_step, last) = progress.first[key], progress.last[key]
            lines.append(f"  {label}: {figure(first)} at step {first_step} -> {figure(last)} at step {last_step}")
    lines += written(output_dir)
    if trackio_project is not None:
        lines.append("trackio dashboard, opening on the reward and the entropy:")
        lines += [f"  {line}" for line in show_command_lines(trackio_project)]
    lines += next_step(output_dir, tiny_model=tiny_model, vllm_installed=vllm_installed)
    return "\n".join(lines)
