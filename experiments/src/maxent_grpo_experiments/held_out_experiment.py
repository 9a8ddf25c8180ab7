"""The flow of a held-out benchmark: per seed a base model and every method from it, evaluated on held-out prompts.

`benchmarks/reasoning_boundary.py`, `benchmarks/multi_token_answers.py` and `benchmarks/minority_routes.py` differ in
their task (prompts, reward, corpus, grading) and share the rest, which lives here. A script describes its task as a
`HeldOutTask` (its model and base model a `maxent_grpo_experiments.held_out_setup.HeldOutSetup`) and its command line
as a `maxent_grpo_experiments.held_out_options.HeldOutCommand`, and calls `run_benchmark`, which runs `run_methods`:
per seed, the base model (`HeldOutSetup.pretrain_base`), then every method of ``--methods`` in the order
of `maxent_grpo_experiments.entropy_grid.run_plan` trained from it
(`maxent_grpo_experiments.from_base.train_from_base`), each model evaluated on the held-out prompts (sampled pass@k and
the task's figures, exact pass@k from the logits), a line printed per run. The fixed entropy arm's coefficient is
chosen on its grid (`maxent_grpo_experiments.entropy_grid.choose`), the figures summarised over seeds and MaxEnt paired
with each other method (`maxent_grpo_experiments.over_seeds`): `HeldOutRuns`. `held_out_result` is the benchmark's
JSON, `write_outputs` writes it with the figure, and `run_benchmark` does all of it, the tables printed
(`maxent_grpo_experiments.held_out_report.print_tables`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from maxent_grpo_experiments.entropy_grid import FIXED, arm_runs, choose, run_plan
from maxent_grpo_experiments.from_base import train_from_base
from maxent_grpo_experiments.held_out_methods import method_labels, method_settings
from maxent_grpo_experiments.held_out_plot import plot_pass_at_k
from maxent_grpo_experiments.held_out_report import Column, print_tables
from maxent_grpo_experiments.held_out_setup import HeldOutSetup
from maxent_grpo_experiments.over_seeds import paired_differences, summarize_runs
from maxent_grpo_experiments.seed_processes import map_seeds
from maxent_grpo_experiments.smoothing import SMOOTHING_WINDOW
from maxent_grpo_experiments.step_recorder import StepRecorder
from maxent_grpo_experiments.trl_baselines import trainer_kind

__all__ = ["HeldOutRuns", "HeldOutTask", "held_out_result", "run_benchmark", "run_methods", "write_outputs"]


@dataclass(frozen=True)
class HeldOutTask:
    """What a held-out benchmark's task is: its model, prompts, reward and evaluation, and what it reports.

    Attributes:
        setup: the tokenizer, the model and the base model, how completions are sampled and the exact probability of
            a correct one.
        reward: the RL reward function, ``reward(completions, prompts)``.
        evaluate: ``evaluate(prompts, completions)``: the run's figures, with ``pass_at_k``, ``distinct_correct``
            and ``correct_per_prompt``.
        training_prompts: the prompts of the RL runs.
        num_generations: completions per prompt and step.
        learning_rate: the RL runs' initial learning rate.
        figures: the run figures besides pass@k that MaxEnt is paired with each method on.
        summary_keys: the run figures summarised over seeds, in the JSON's order.
        grid_figures: the figures the entropy grid's report gives per coefficient, besides its choice's.
        progress: the figures of a run's printed line after its pass@k: (words, figure key, format).
        name_width: the width of the method's name in that line.
        intro: the line above the first table, with ``{prompts}`` (the number of held-out prompts) and ``{samples}``.
        columns: the table columns after the sampled pass@k (`maxent_grpo_experiments.held_out_report.print_tables`).
        minus: the columns of the MaxEnt-minus table: header, figure key, k (None for a number).
        title: the figure's title, with ``{training}`` and ``{heldout}`` (the numbers of prompts).
        recorded: task settings the JSON records after ``learning_rate``.
        more_figures: figures a run adds that need more than `evaluate` sees (a probe set of training prompts, a split
            of the held-out prompts that depends on the seed): ``more_figures(model, tokenizer, figures, seed,
            samples)`` returns them, ``figures`` being the run's held-out figures so far (with
            ``correct_probability_per_prompt``) and ``samples`` the completions ``--samples`` asks per prompt.
    """

    setup: HeldOutSetup
    reward: Callable[..., list[float]]
    evaluate: Callable[[Sequence[str], Sequence[Sequence[str]]], dict[str, Any]]
    training_prompts: tuple[str, ...]
    num_generations: int
    learning_rate: float
    figures: tuple[str, ...]
    summary_keys: tuple[str, ...]
    grid_figures: tuple[str, ...]
    progress: tuple[tuple[str, str, str], ...]
    name_width: int
    intro: str
    columns: tuple[Column, ...]
    minus: tuple[tuple[str, str, int | None], ...]
    title: str
    recorded: Mapping[str, Any] = field(default_factory=dict)
    more_figures: (
        Callable[[PreTrainedModel, PreTrainedTokenizerBase, Mapping[str, Any], int, int], dict[str, Any]] | None
    ) = None


@dataclass(frozen=True)
class HeldOutRuns:
    """What `run_methods` trained and how it reads.

    Attributes:
        runs: every run of the base model and of each method, per seed in run order (the fixed entropy arm's those
            of the chosen coefficient), each ``method``, ``seed``, ``seconds`` (and ``entropy_coef``) and figures.
        grid: the entropy grid's report (`maxent_grpo_experiments.entropy_grid.choose`), None without the fixed arm.
        curves: per method, the training reward per step of each seed's run.
        labels: per method, its label (`maxent_grpo_experiments.held_out_methods.method_labels`).
        summary: per method (the base model first), its figures over seeds.
        comparisons: MaxEnt minus each other method, per figure and method, paired by seed (empty without MaxEnt).
    """

    runs: list[dict[str, Any]]
    grid: dict[str, Any] | None
    curves: dict[str, list[list[float]]]
    labels: dict[str, str]
    summary: dict[str, Any]
    comparisons: dict[str, Any]

    @property
    def chosen(self) -> float | None:
        """The fixed entropy arm's coefficient, None when it did not run."""
        return None if self.grid is None else self.grid["chosen"]


def _progress_line(task: HeldOutTask, seed: int, name: str, seconds: float, figures: Mapping[str, Any]) -> str:
    ks = task.setup.ks
    cells = " ".join(f"{v:.3f}" for v in figures["pass_at_k"].values())
    words = "".join(f"{text} {figures[key]:{spec}}, " for text, key, spec in task.progress)
    unsolved = [prompt for prompt, c in figures["correct_per_prompt"].items() if c == 0]
    return (
        f"seed {seed} {name:<{task.name_width}} {seconds:6.1f}s: held-out pass@{','.join(map(str, ks))} {cells}, "
        f"{words}unsolved {unsolved or 'none'}, exact pass@{max(ks)} {figures['exact_pass_at_k'][str(max(ks))]:.3f}"
    )


@dataclass(frozen=True)
class _SeedRuns:
    """One seed's runs: those of the base model and the arms, those of the entropy grid, and each RL run's training
    reward per step, keyed by (method, coefficient)."""

    runs: list[dict[str, Any]]
    grid_runs: list[dict[str, Any]]
    curves: dict[tuple[str, float | None], list[float]]


def _run_seed(
    task: HeldOutTask,
    args: argparse.Namespace,
    tokenizer: PreTrainedTokenizerBase,
    heldout: Sequence[str],
    seed: int,
) -> _SeedRuns:
    """The base model of ``seed`` and every run of `run_plan` from it, each evaluated, a line printed per run."""
    runs: list[dict[str, Any]] = []
    grid_runs: list[dict[str, Any]] = []
    curves: dict[tuple[str, float | None], list[float]] = {}
    for method, coefficient in [("base", None), *run_plan(args.methods, args.entropy_grid)]:
        run_start = time.perf_counter()
        record: dict[str, Any] = {"method": method, "seed": seed}
        if method == "base":
            model = base = task.setup.pretrain_base(tokenizer, seed)
        else:
            recorder = StepRecorder(task.reward)
            model = train_from_base(
                base,
                tokenizer,
                trainer_kind(method),
                method_settings(method, coefficient, args.maxent),
                prompts=task.training_prompts,
                reward=recorder,
                seed=seed,
                steps=args.steps,
                prompts_per_step=args.prompts_per_step,
                num_generations=task.num_generations,
                completion_length=task.setup.completion_length,
                learning_rate=task.learning_rate,
            )
            curves[(method, coefficient)] = recorder.rewards
            if coefficient is not None:
                record["entropy_coef"] = coefficient
        figures = task.evaluate(heldout, task.setup.sample(model, tokenizer, heldout, args.samples, 1000 + seed))
        probabilities = task.setup.correct_probabilities(model, tokenizer, heldout)
        figures["exact_pass_at_k"] = task.setup.exact_pass_at_k(probabilities)
        figures["correct_probability_per_prompt"] = dict(zip(heldout, probabilities, strict=True))
        if task.more_figures is not None:
            figures |= task.more_figures(model, tokenizer, figures, seed, args.samples)
        if method != "base":
            figures["final_training_reward"] = statistics.fmean(recorder.rewards[-SMOOTHING_WINDOW:])
        seconds = time.perf_counter() - run_start
        record = {**record, "seconds": round(seconds, 1), **figures}
        (runs if coefficient is None else grid_runs).append(record)
        name = method if coefficient is None else f"{method}={coefficient:g}"
        print(_progress_line(task, seed, name, seconds, figures), flush=True)
    return _SeedRuns(runs, grid_runs, curves)


def run_methods(
    task: HeldOutTask, args: argparse.Namespace, tokenizer: PreTrainedTokenizerBase, heldout: Sequence[str]
) -> HeldOutRuns:
    """Train and evaluate the base model and every method of ``args.methods`` on every seed, printing a line a run.

    Args:
        task: the task.
        args: the parsed command line (`maxent_grpo_experiments.held_out_options`).
        tokenizer: the task's tokenizer.
        heldout: the held-out prompts.

    Returns:
        The runs, the grid, the curves, and the figures over seeds.
    """
    per_seed = map_seeds(
        lambda seed: _run_seed(task, args, tokenizer, heldout, seed),
        range(args.first_seed, args.first_seed + args.seeds),
        args.workers,
    )
    runs = [record for seed_runs in per_seed for record in seed_runs.runs]
    grid_runs = [record for seed_runs in per_seed for record in seed_runs.grid_runs]
    curves: dict[tuple[str, float | None], list[list[float]]] = {}
    for seed_runs in per_seed:
        for arm, rewards in seed_runs.curves.items():
            curves.setdefault(arm, []).append(rewards)

    grid = None
    if FIXED in args.methods:
        grpo_runs = [r for r in runs if r["method"] == "grpo"]
        grid = choose(grid_runs, grpo_runs, args.entropy_grid, task.grid_figures)
        runs = arm_runs(runs, grid_runs, grid["chosen"], ["base", *args.methods])
        curves[(FIXED, None)] = curves[(FIXED, grid["chosen"])]
    labels = method_labels(args.maxent, None if grid is None else grid["chosen"], len(args.entropy_grid))
    methods = ["base", *args.methods]
    summary = {m: summarize_runs([r for r in runs if r["method"] == m], task.summary_keys) for m in methods}
    comparisons: dict[str, Any] = {}
    if "maxent" in args.methods:
        keys = ("pass_at_k", "exact_pass_at_k", *task.figures)
        comparisons = {key: paired_differences(runs, "maxent", key) for key in keys}
    method_curves = {m: curves[(m, None)] for m in args.methods}
    return HeldOutRuns(runs, grid, method_curves, labels, summary, comparisons)


def held_out_result(
    task: HeldOutTask, args: argparse.Namespace, heldout: Sequence[str], outcome: HeldOutRuns, started: float
) -> dict[str, Any]:
    """The benchmark's JSON: settings, summary, MaxEnt's paired differences, the grid, every run, mean reward curves
    and the seconds since ``started`` (a `time.perf_counter` value)."""
    return {
        "settings": {
            "seeds": args.seeds,
            "first_seed": args.first_seed,
            "steps": args.steps,
            "prompts_per_step": args.prompts_per_step,
            "num_generations": task.num_generations,
            "learning_rate": task.learning_rate,
            **task.recorded,
            "samples": args.samples,
            "training_prompts": len(task.training_prompts),
            "heldout_prompts": list(heldout),
            "model": task.setup.model_settings(),
            "pretrain": task.setup.pretrain_settings(),
            "methods": {m: method_settings(m, outcome.chosen, []) for m in args.methods},
            "maxent_overrides": dict(args.maxent),
            "entropy_grid": list(args.entropy_grid),
        },
        "summary": outcome.summary,
        "maxent_minus": outcome.comparisons,
        "entropy_grid": outcome.grid,
        "runs": outcome.runs,
        "reward_curves_mean_over_seeds": {
            m: [round(statistics.fmean(v), 4) for v in zip(*outcome.curves[m], strict=True)] for m in args.methods
        },
        "total_seconds": round(time.perf_counter() - started, 1),
    }


def write_outputs(
    name: str, result: Mapping[str, Any], outcome: HeldOutRuns, output_dir: Path, ks: Sequence[int], title: str
) -> None:
    """Write ``<name>.json`` and ``<name>.png`` (`maxent_grpo_experiments.held_out_plot.plot_pass_at_k`, titled
    ``title``) into ``output_dir`` and say so."""
    path = output_dir / f"{name}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    plot_pass_at_k(outcome.summary, outcome.curves, outcome.labels, output_dir / f"{name}.png", ks=ks, title=title)
    print(f"total {result['total_seconds']:.0f}s; wrote {path} and the PNG")


def run_benchmark(name: str, task: HeldOutTask, args: argparse.Namespace, heldout: Sequence[str]) -> dict[str, Any]:
    """Run a held-out benchmark: `run_methods` with the task's tokenizer, print the tables, write ``<name>.json`` and
    ``<name>.png`` into ``args.output_dir`` (`write_outputs`).

    The model is tiny: torch runs on one thread, as more only add contention on a small machine.

    Args:
        name: the benchmark's name, that of its files.
        task: the task.
        args: the parsed command line (`maxent_grpo_experiments.held_out_options.HeldOutCommand.parse_args`).
        heldout: the held-out prompts.

    Returns:
        The JSON's content (`held_out_result`).
    """
    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    args.output_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    outcome = run_methods(task, args, task.setup.tokenizer(), heldout)
    print_tables(
        outcome.summary,
        outcome.grid,
        outcome.comparisons,
        outcome.labels,
        ks=task.setup.ks,
        seeds=args.seeds,
        intro=task.intro.format(prompts=len(heldout), samples=args.samples),
        figures=task.columns,
        minus=task.minus,
    )
    result = held_out_result(task, args, heldout, outcome, started)
    title = task.title.format(training=len(task.training_prompts), heldout=len(heldout))
    write_outputs(name, result, outcome, args.output_dir, task.setup.ks, title)
    return result
