"""Training progress as `maxent-grpo train` shows it: the few figures a user watches, or every logged figure.

By default (`WatchedProgress`) progress shows the step, the reward, the mode coverage and the policy's token entropy
where they are logged, the generation drops when there are any, and the time left: a progress bar on a terminal,
one line per logging step otherwise (a log file, or ``disable_tqdm``, as transformers decides between its bar and its
printer). Every logged figure still goes to the trackers of ``report_to`` and to ``<output_dir>/metrics.jsonl``
(`metrics_file`). With ``log_level`` ``info`` or ``debug`` (transformers' own verbosity setting) the full lines of
transformers come back: its bar printing each log whole on a terminal, `LineProgressCallback` in a log file.

A tqdm bar redraws itself with carriage returns, which a log file keeps as one ever-growing line: the trainer's
step bar, `datasets`' "Generating train split" and transformers' "Writing model shards".
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any

import datasets
import transformers
from tqdm.auto import tqdm
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from maxent_grpo.cli.metrics_file import metrics_path
from maxent_grpo.number_format import figure

#: The figures `WatchedProgress` shows, each as (logged key, label), where the run logs them.
WATCHED = (
    ("reward", "reward"),
    ("maxent/mode_coverage", "mode coverage"),
    ("entropy", "token entropy"),
)
#: Shown only when not 0, the prompt groups dropped by the generation step.
DROPPED = ("generation/dropped_prompts", "dropped prompts")
#: The share of clipped completions (TRL's ``completions/clipped_ratio``) above which progress warns, once.
MOSTLY_CLIPPED = 0.5
#: transformers' ``log_level`` values that keep every logged figure in the progress lines.
FULL_LOG_LEVELS = ("debug", "info")


def full_logs(args: TrainingArguments) -> bool:
    """Whether progress shows every logged figure (``log_level`` ``info`` or ``debug``) instead of `WATCHED`."""
    return args.log_level in FULL_LOG_LEVELS


class WatchedProgress(TrainerCallback):
    """Progress of the few figures a user watches (`WATCHED`), with the time left; records the first and last value
    of each for the run's summary (`first`, `last`).

    Args:
        lines: one line per log on stderr instead of a progress bar.
    """

    def __init__(self, lines: bool) -> None:
        self.lines = lines
        self.first: dict[str, tuple[int, float]] = {}  # key -> (step, value) of its first log
        self.last: dict[str, tuple[int, float]] = {}
        self.seconds = 0.0
        self._bar: tqdm | None = None
        self._start = time.monotonic()
        self._start_step = 0
        self._warned: set[str] = set()

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._start, self._start_step = time.monotonic(), state.global_step  # a resumed run starts past 0
        if not state.is_world_process_zero:
            return
        # On stdout, with the summary: stderr holds progress and, when a run fails, its one error line.
        print("\n".join(opening_lines(args.output_dir)), flush=True)
        if not self.lines:
            self._bar = tqdm(
                total=state.max_steps, initial=state.global_step, desc="train", unit="step", dynamic_ncols=True
            )

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self._bar is not None:
            self._bar.update(state.global_step - self._bar.n)

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
        for key, warning in signal_warnings(args, logs).items():
            if key not in self._warned:
                self._warned.add(key)
                (self._bar.write if self._bar is not None else print)(f"warning: {warning}", file=sys.stderr)
        shown = {label: logs[key] for key, label in WATCHED if _number(logs.get(key))}
        for key, _ in WATCHED:
            if _number(logs.get(key)):
                self.first.setdefault(key, (state.global_step, logs[key]))
                self.last[key] = (state.global_step, logs[key])
        if dropped := logs.get(DROPPED[0]):  # a count (a mean of counts over the logging steps when not whole)
            shown[DROPPED[1]] = int(dropped) if float(dropped).is_integer() else dropped
        if not shown:
            return
        if self._bar is not None:
            self._bar.set_postfix({label: _short(value) for label, value in shown.items()}, refresh=True)
            return
        figures = ", ".join(f"{label} {_short(value)}" for label, value in shown.items())
        share = 100 * state.global_step / max(state.max_steps, 1)
        where = f"step {state.global_step}/{state.max_steps} ({share:.0f}%)"
        print(f"{where}: {figures}{self._pace(state)}", file=sys.stderr)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.seconds = time.monotonic() - self._start
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _pace(self, state: TrainerState) -> str:
        """`` | s/step, time left`` from the steps taken so far in this run (none before the first)."""
        done = state.global_step - self._start_step
        if done <= 0:
            return ""
        per_step = (time.monotonic() - self._start) / done
        left = per_step * max(state.max_steps - state.global_step, 0)
        return f" | {figure(per_step)} s/step, {format_seconds(left)} left"


def signal_warnings(args: TrainingArguments, logs: dict[str, Any]) -> dict[str, str]:
    """What in one log says that training learns little, by logged key: most completions clipped at
    ``max_completion_length`` (`MOSTLY_CLIPPED`), or no group whose rewards differ (``frac_reward_zero_std`` 1), each
    with the field to change."""
    warnings = {}
    clipped = logs.get("completions/clipped_ratio")
    if _number(clipped) and clipped > MOSTLY_CLIPPED:
        warnings["completions/clipped_ratio"] = (
            f"{100 * clipped:.0f}% of the completions stopped at max_completion_length ({args.max_completion_length}) "
            "before they ended:\n  raise --max_completion_length"
        )
    if _number(flat := logs.get("frac_reward_zero_std")) and flat >= 1.0:
        warnings["frac_reward_zero_std"] = (
            f"every group of num_generations ({args.num_generations}) completions got equal rewards "
            "(frac_reward_zero_std 1),\n  so there is no learning signal: raise --num_generations or --temperature, "
            "or use a reward that tells them apart"
        )
    return warnings


def opening_lines(output_dir: str) -> list[str]:
    """What progress shows and where every logged figure goes, said once as training begins."""
    *first, last = [label for _, label in WATCHED]
    return [
        f"progress shows {', '.join(first)} and {last} where logged (every logged figure with --log_level info);",
        f"every logged figure goes to report_to and to {metrics_path(output_dir)}",
    ]


def format_seconds(seconds: float) -> str:
    """``42 s``, ``3 min 05 s`` or ``2 h 04 min``."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


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
    return figure(value) if isinstance(value, float) else str(value)


def silence_library_progress_bars() -> None:
    """No tqdm bars from `datasets` (loading) and transformers (saving)."""
    datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()
