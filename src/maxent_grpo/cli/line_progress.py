"""Training progress for a log file: one line per logging step instead of redrawn progress bars.

A tqdm bar redraws itself with carriage returns, which a log file keeps as one ever-growing line: the trainer's
step bar, `datasets`' "Generating train split" and transformers' "Writing model shards".
"""

from __future__ import annotations

import sys
import time
from typing import Any

import datasets
import transformers
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments


class LineProgressCallback(TrainerCallback):
    """Progress as one line per logging step on stderr: step, share of ``max_steps``, elapsed time and the logs."""

    def __init__(self) -> None:
        self._start = time.monotonic()

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._start = time.monotonic()

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not state.is_local_process_zero or not logs:
            return
        share = 100 * state.global_step / max(state.max_steps, 1)
        values = ", ".join(f"{key}={_short(value)}" for key, value in logs.items())
        elapsed = time.monotonic() - self._start
        print(f"step {state.global_step}/{state.max_steps} ({share:.0f}%, {elapsed:.0f} s): {values}", file=sys.stderr)


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def silence_library_progress_bars() -> None:
    """No tqdm bars from `datasets` (loading) and transformers (saving)."""
    datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()
