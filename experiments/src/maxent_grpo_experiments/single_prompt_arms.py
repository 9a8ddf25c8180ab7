"""The runs of the single-prompt benchmarks: the entropy grid, the choice of its coefficient, then the other arms.

`run_arms` trains every arm of `maxent_grpo_experiments.trl_baselines.ARMS` that a benchmark selected, through the
benchmark's own ``train`` callback, in a fixed order (grid phase, then main phase), and returns them as `ArmRuns`,
which also gives the arms' labels and the settings the benchmarks' JSON records about the grid.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from maxent_grpo_experiments.entropy_grid import fixed_label
from maxent_grpo_experiments.single_prompt import selected_methods
from maxent_grpo_experiments.trl_baselines import REWARD_TOLERANCE, admissible, arm_fields, choose_fixed_coefficient

__all__ = ["ArmRuns", "Run", "RunOutput", "run_arms", "selection_rule"]


#: What a benchmark's ``train`` callback of `run_arms` returns for one run: the figures of the answers sampled after
#: training (a JSON-ready mapping) and the per-step curves of the scored groups (name -> one value per step).
RunOutput = tuple[dict[str, Any], dict[str, list[float]]]


@dataclass(frozen=True)
class Run:
    """One trained model: its arm, seed, the phase it was trained in (``"grid"`` or ``"main"``), figures, curves.

    ``entropy_coef`` is the fixed coefficient of a ``grpo_entropy_fixed`` run (None for every other arm).
    """

    method: str
    seed: int
    phase: str
    seconds: float
    figures: Mapping[str, Any]
    curves: Mapping[str, list[float]]
    entropy_coef: float | None = None

    def record(self) -> dict[str, Any]:
        """The run as the benchmarks' JSON lists it: ``method``, ``seed``, ``phase``, ``seconds``, ``entropy_coef``
        (fixed-entropy runs only), then the figures."""
        record: dict[str, Any] = {"method": self.method, "seed": self.seed, "phase": self.phase}
        record["seconds"] = round(self.seconds, 1)
        if self.entropy_coef is not None:
            record["entropy_coef"] = self.entropy_coef
        return {**record, **self.figures}


@dataclass(frozen=True)
class ArmRuns:
    """What `run_arms` trained.

    ``runs`` holds one run per arm and seed, per seed in the order of `maxent_grpo_experiments.trl_baselines.ARMS`;
    ``grid_runs`` every coefficient of the grid on every seed (the chosen coefficient's runs are also the
    ``grpo_entropy_fixed`` runs of ``runs``). ``entropy_grid`` gives per coefficient the mean over seeds of the reward
    and diversity figures and whether it was admissible; ``grpo_reward`` is stock GRPO's mean reward it was judged
    against. Without a ``grpo_entropy_fixed`` arm the grid is empty and ``fixed_coefficient`` and ``grpo_reward`` are
    None.
    """

    runs: list[Run]
    grid_runs: list[Run]
    fixed_coefficient: float | None
    grpo_reward: float | None
    entropy_grid: dict[float, dict[str, Any]]

    def labels(self, labels: Mapping[str, str]) -> dict[str, str]:
        """``labels`` of the arms, the fixed entropy arm's naming its chosen coefficient when it ran."""
        labels = dict(labels)
        if self.fixed_coefficient is not None:
            labels["grpo_entropy_fixed"] = fixed_label(self.fixed_coefficient)
        return labels

    def settings(self, methods: Sequence[str], diversity: str) -> dict[str, Any]:
        """What the benchmarks' JSON records about the arms and the grid, chosen by ``diversity``: every TRL arm's
        `GRPOConfig` fields (``trl_fields``), the grid, the chosen coefficient and `selection_rule`."""
        return {
            "trl_fields": {m: arm_fields(m, self.fixed_coefficient) for m in methods if m.startswith("grpo")},
            "entropy_grid": sorted(self.entropy_grid),
            "entropy_coef_chosen": self.fixed_coefficient,
            "entropy_coef_selection": selection_rule(diversity),
        }


def selection_rule(diversity: str, reward: str = "mean_reward") -> str:
    """The rule `run_arms` chooses the fixed coefficient by, in words, as the benchmarks' JSON records it."""
    return (
        f"the grid coefficient with the highest {diversity} among those whose {reward} is at most {REWARD_TOLERANCE} "
        f"below stock GRPO's, else the one with the highest {reward}; each figure the mean over the same seeds, ties "
        "to the smaller coefficient (maxent_grpo_experiments.trl_baselines.choose_fixed_coefficient). It is chosen on "
        "the seeds it is reported on, which favours this arm."
    )


def run_arms(
    methods: Sequence[str],
    seeds: int,
    entropy_grid: Sequence[float],
    train: Callable[[str, int, Mapping[str, Any]], RunOutput],
    describe: Callable[[Mapping[str, Any]], str],
    diversity: str,
    reward: str = "mean_reward",
) -> ArmRuns:
    """Train every arm of ``methods`` on seeds 0 .. ``seeds``-1, printing a line per trained run.

    Grid phase, when ``grpo_entropy_fixed`` is one of ``methods``: per seed, stock GRPO and GRPO with
    ``fixed_entropy(c)`` for every ``c`` of ``entropy_grid``. The coefficient is chosen by `selection_rule`: by
    `maxent_grpo_experiments.trl_baselines.choose_fixed_coefficient` on the means over seeds of ``figures[diversity]``
    and ``figures[reward]``, against stock GRPO's mean reward. Stock GRPO's grid runs and the chosen coefficient's are
    the ``grpo`` and ``grpo_entropy_fixed`` runs: same seeds and settings, not trained again. Main phase: per seed,
    every other arm of ``methods`` in the order of `maxent_grpo_experiments.trl_baselines.ARMS`.

    Args:
        methods: arms of `maxent_grpo_experiments.trl_baselines.ARMS` (see
            `maxent_grpo_experiments.single_prompt.selected_methods`).
        seeds: the number of seeds.
        entropy_grid: the fixed ``entropy_coef`` values tried (each > 0).
        train: trains one run, ``train(method, seed, trl_fields)``, and returns its figures and curves.
        describe: the figures of a run in a few words, for its progress line.
        diversity: the figures' key of the diversity the coefficient is chosen by.
        reward: the figures' key of the reward it is judged by.

    Returns:
        The runs, the grid's runs and figures, and the chosen coefficient.
    """
    methods = selected_methods(methods)
    grid = sorted(set(entropy_grid)) if "grpo_entropy_fixed" in methods else []
    if "grpo_entropy_fixed" in methods and not grid:
        raise ValueError("grpo_entropy_fixed needs a non-empty entropy grid")
    grid_arms: list[tuple[str, float | None]] = [("grpo", None), *(("grpo_entropy_fixed", c) for c in grid)]
    main_arms = [m for m in methods if not (grid and m in ("grpo", "grpo_entropy_fixed"))]
    total = seeds * ((len(grid_arms) if grid else 0) + len(main_arms))
    trained: list[Run] = []
    started = time.perf_counter()

    def train_one(method: str, seed: int, phase: str, coefficient: float | None = None) -> Run:
        trl_fields = arm_fields(method, coefficient)
        run_start = time.perf_counter()
        figures, curves = train(method, seed, trl_fields)
        seconds = time.perf_counter() - run_start
        run = Run(method, seed, phase, seconds, figures, curves, coefficient)
        trained.append(run)
        name = method if coefficient is None else f"{method} entropy_coef={coefficient:g}"
        print(
            f"[{len(trained)}/{total}] {phase} seed {seed} {name:<18} {seconds:6.1f}s "
            f"(elapsed {time.perf_counter() - started:6.1f}s): {describe(figures)}",
            flush=True,
        )
        return run

    grid_runs: list[Run] = []
    grpo_runs: dict[int, Run] = {}
    chosen: float | None = None
    grpo_reward: float | None = None
    table: dict[float, dict[str, Any]] = {}
    if grid:
        for seed in range(seeds):
            for method, coefficient in grid_arms:
                run = train_one(method, seed, "grid", coefficient)
                if coefficient is None:
                    grpo_runs[seed] = run
                else:
                    grid_runs.append(run)
        grpo_reward = statistics.fmean(run.figures[reward] for run in grpo_runs.values())
        means = {
            key: {c: statistics.fmean(r.figures[key] for r in grid_runs if r.entropy_coef == c) for c in grid}
            for key in (reward, diversity)
        }
        chosen = choose_fixed_coefficient(means[diversity], means[reward], grpo_reward, tolerance=REWARD_TOLERANCE)
        table = {
            c: {
                reward: means[reward][c],
                diversity: means[diversity][c],
                "admissible": admissible(means[reward][c], grpo_reward),
            }
            for c in grid
        }
        print(f"\nentropy grid, mean over {seeds} seed(s); stock GRPO's {reward} {grpo_reward:.3f}")
        print(f"{'entropy_coef':>14}{reward:>20}{diversity:>20}  admissible (at most {REWARD_TOLERANCE} below)")
        for c, figures in table.items():
            mark = "yes" if figures["admissible"] else "no"
            mark += " <- chosen" if c == chosen else ""
            print(f"{c:>14g}{figures[reward]:>20.3f}{figures[diversity]:>20.3f}  {mark}")
        if not any(figures["admissible"] for figures in table.values()):
            print("none admissible: the coefficient with the highest reward is chosen")
        print(f"grpo_entropy_fixed: entropy_coef={chosen:g} (its grid runs and stock GRPO's are reused)\n", flush=True)

    runs: list[Run] = []
    for seed in range(seeds):
        for method in methods:
            if grid and method == "grpo":
                runs.append(grpo_runs[seed])
            elif grid and method == "grpo_entropy_fixed":
                runs.extend(r for r in grid_runs if r.seed == seed and r.entropy_coef == chosen)
            else:
                runs.append(train_one(method, seed, "main"))
    return ArmRuns(runs, grid_runs, chosen, grpo_reward, table)
