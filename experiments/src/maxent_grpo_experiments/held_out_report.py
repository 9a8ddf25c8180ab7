"""The printed tables of the held-out benchmarks: figures per method, the entropy grid, MaxEnt minus each method.

Each table is a column of labels and columns of right-aligned cells; a cell is empty where a method has no such
figure (the base model has no training reward). `print_tables` prints them all from a benchmark's summary, its
entropy grid (`maxent_grpo_experiments.entropy_grid`) and MaxEnt's paired differences
(`maxent_grpo_experiments.over_seeds`), and closes with one plain sentence per TRL arm (`comparison_sentence`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from maxent_grpo_experiments.over_seeds import format_difference, verdict

__all__ = ["Column", "comparison_sentence", "figure_cell", "print_table", "print_tables"]

#: A table column: its header, its width and the function that formats a row's cell from its figures.
Column = tuple[str, int, Callable[[Mapping[str, Any]], str]]


def print_table(
    rows: Mapping[Any, Mapping[str, Any]], labels: Mapping[Any, str], columns: Sequence[Column], title: str = "method"
) -> None:
    """Print one row per entry of ``rows`` (key -> its figures), labelled by ``labels[key]``.

    Args:
        rows: per row key, its figures, in print order.
        labels: per row key, the label of its row.
        columns: the columns (`Column`); a cell function returns ``""`` for an empty cell.
        title: the header of the label column.
    """
    width = max(len(labels[key]) for key in rows) + 2
    print(f"{title:<{width}}" + "".join(f"{header:>{size}}" for header, size, _ in columns))
    for key, figures in rows.items():
        print(f"{labels[key]:<{width}}" + "".join(f"{cell(figures):>{size}}" for _, size, cell in columns))


def figure_cell(key: str, k: int | None = None, digits: int = 3) -> Callable[[Mapping[str, Any]], str]:
    """The cell of figure ``key`` (of its pass@k mapping at ``k``, if given) with ``digits`` decimals; empty where a
    row lacks it."""

    def cell(figures: Mapping[str, Any]) -> str:
        value = figures.get(key)
        if value is not None and k is not None:
            value = value[str(k)]
        return "" if value is None else f"{value:.{digits}f}"

    return cell


def _difference_cell(key: str, k: int | None = None) -> Callable[[Mapping[str, Any]], str]:
    def cell(differences: Mapping[str, Any]) -> str:
        difference = differences.get(key)
        if difference is None:
            return ""
        return format_difference(difference if k is None else difference[str(k)])

    return cell


def comparison_sentence(
    method_label: str, other_label: str, differences: Sequence[tuple[str, Mapping[str, Any]]]
) -> str:
    """One plain sentence of how a method compares with another on each figure of ``differences``.

    Args:
        method_label: the compared method (``"MaxEnt"``).
        other_label: the other method.
        differences: per figure, its name with its preposition (``"at pass@16"``) and the paired difference
            ``{"mean", "ci95"}``.

    Returns:
        E.g. ``"MaxEnt vs GRPO: ahead at pass@16 (+0.050 [+0.010, +0.090]), level at pass@1 (...)."``; "ahead" /
        "behind" when the paired 95% interval lies above / below 0, "level" when it contains 0 or there is none.
    """
    parts = [f"{verdict(difference)} {name} ({format_difference(difference)})" for name, difference in differences]
    return f"{method_label} vs {other_label}: {', '.join(parts)}."


def print_tables(
    summary: Mapping[str, Mapping[str, Any]],
    grid: Mapping[str, Any] | None,
    comparisons: Mapping[str, Mapping[str, Any]],
    labels: Mapping[str, str],
    *,
    ks: Sequence[int],
    seeds: int,
    intro: str,
    figures: Sequence[Column],
    minus: Sequence[tuple[str, str, int | None]],
) -> None:
    """Print every table of a held-out benchmark.

    Args:
        summary: per method, its figures over seeds (``pass_at_k``, ``exact_pass_at_k``, ``final_training_reward``
            where it trained, and those of ``figures``).
        grid: the entropy grid's report (`maxent_grpo_experiments.entropy_grid.choose`), or None when the arm did not
        run.
        comparisons: MaxEnt minus each method, per figure key (``"pass_at_k"``, ...) and method, paired by seed;
            empty when MaxEnt did not run.
        labels: per method, its label.
        ks: the k of the pass@k columns.
        seeds: how many seeds the figures are over.
        intro: the line above the first table (what the prompts and samples are).
        figures: the columns after the sampled pass@k, before the training reward.
        minus: the columns of the MaxEnt-minus table: header, figure key, k (None for a number).

    The sentences read pass@16, pass@``max(ks)``, distinct correct answers and pass@``min(ks)``: ``ks`` must hold 16,
    and ``comparisons`` ``"distinct_correct"``.
    """
    print(f"\n{intro}")
    reward: Column = ("train reward", 14, figure_cell("final_training_reward"))
    print_table(summary, labels, [*((f"pass@{k}", 10, figure_cell("pass_at_k", k)) for k in ks), *figures, reward])
    print("\nexact: the model's own pass@k, 1 - (1 - p)^k, p = each prompt's probability of a correct completion")
    print_table(summary, labels, [(f"pass@{k}", 10, figure_cell("exact_pass_at_k", k)) for k in ks])
    if grid is not None:
        grpo = grid["grpo_final_training_reward"]
        rule = "the only one" if len(grid["grid"]) == 1 else (
            f"most {grid['diversity']} among those whose {grid['reward']} is within {grid['tolerance']} of GRPO's "
            f"({grpo:.3f})"
        )  # fmt: skip
        print(f"\n{labels.get('grpo_entropy_fixed', 'fixed entropy_coef')}: the grid over {seeds} seed(s); {rule}")
        rows = {c: grid["figures"][str(c)] for c in grid["grid"]}
        names = {c: f"entropy_coef={c:g}" + (" (chosen)" if c == grid["chosen"] else "") for c in grid["grid"]}
        pass_cells = [(f"pass@{k}", 10, figure_cell("pass_at_k", k)) for k in (min(ks), max(ks))]
        print_table(rows, names, [*pass_cells, *figures, reward], "coefficient")
    if not comparisons:
        return
    print(f"\nMaxEnt minus each method, paired by seed: mean [95% interval] over {seeds} seed(s)")
    others = {o: {key: comparisons[key].get(o) for key in comparisons} for o in comparisons["pass_at_k"]}
    print_table(others, labels, [(header, 26, _difference_cell(key, k)) for header, key, k in minus])
    print()
    for other, differences in others.items():
        if other.startswith("grpo"):
            items = [
                ("at pass@16", differences["pass_at_k"]["16"]),
                (f"at pass@{max(ks)}", differences["pass_at_k"][str(max(ks))]),
                ("in distinct correct answers", differences["distinct_correct"]),
                (f"at pass@{min(ks)}", differences["pass_at_k"][str(min(ks))]),
            ]
            print(comparison_sentence("MaxEnt", labels[other], items))
