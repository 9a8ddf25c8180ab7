"""Every figure a run logs, one JSON object per log in ``<output_dir>/metrics.jsonl``, whatever progress shows.

The progress of `maxent-grpo train` shows a few figures (`line_progress.WatchedProgress`); the trackers of
``report_to`` get them all, and so does this file, on the main process, appended to on resume: each line is
``{"step": <global step>, <key>: <value>, ...}`` with the keys the metrics glossary lists.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

FILE_NAME = "metrics.jsonl"


def metrics_path(output_dir: str) -> Path:
    """Where a run with ``output_dir`` writes its metrics."""
    return Path(output_dir) / FILE_NAME


class MetricsFile(TrainerCallback):
    """Appends each log, with its step, to `metrics_path` of the run's ``output_dir`` (main process only)."""

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not state.is_world_process_zero or not logs:
            return
        path = metrics_path(args.output_dir)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as file:
            file.write(json.dumps({"step": state.global_step, **logs}) + "\n")
