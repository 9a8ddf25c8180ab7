"""MaxEnt against each TRL arm in the single-prompt benchmarks, in plain words: ahead, level or behind on every seed.

With three seeds there is no interval to speak of, so the single-prompt benchmarks describe their paired runs instead
(`per_seed_verdict`): MaxEnt is *ahead* of an arm on a figure when it is above it on every seed by more than a margin,
*behind* when below it on every seed by more than the margin, *level* otherwise. `compare_with_maxent` takes the
differences seed by seed, `comparison_lines` puts them in sentences. The held-out benchmarks, with more seeds, use the
paired 95% interval of `maxent_grpo_experiments.over_seeds.verdict` instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from maxent_grpo_experiments.single_prompt_arms import Run

__all__ = ["compare_with_maxent", "comparison_lines", "per_seed_verdict"]


def per_seed_verdict(differences: Sequence[float], margin: float) -> str:
    """``"ahead"`` when every difference (MaxEnt minus another arm, one per seed) is above ``margin``, ``"behind"``
    when every one is below ``-margin``, else ``"level"``.

    Raises:
        ValueError: without any difference.
    """
    if not differences:
        raise ValueError("a verdict needs at least one difference")
    if all(d > margin for d in differences):
        return "ahead"
    if all(d < -margin for d in differences):
        return "behind"
    return "level"


def compare_with_maxent(runs: Sequence[Run], margins: Mapping[str, float]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per TRL arm of ``runs`` and figure key of ``margins``: MaxEnt's figure minus the arm's, seed by seed
    (``differences``), and their `per_seed_verdict` with the key's margin. Empty without a MaxEnt run."""
    by_seed = {(r.method, r.seed): r.figures for r in runs}
    seeds = sorted({r.seed for r in runs if r.method == "maxent"})
    others = [m for m in dict.fromkeys(r.method for r in runs) if m != "maxent"]
    result: dict[str, dict[str, dict[str, Any]]] = {}
    for other in others if seeds else []:
        result[other] = {}
        for key, margin in margins.items():
            differences = [by_seed["maxent", s][key] - by_seed[other, s][key] for s in seeds]
            result[other][key] = {"differences": differences, "verdict": per_seed_verdict(differences, margin)}
    return result


def comparison_lines(
    comparisons: Mapping[str, Mapping[str, Mapping[str, Any]]],
    labels: Mapping[str, str],
    names: Mapping[str, str],
    margins: Mapping[str, float],
) -> list[str]:
    """The sentences of `compare_with_maxent`'s result: the rule, then one per TRL arm (``names`` names each figure
    key in words)."""
    if not comparisons:
        return []
    seeds = len(next(iter(next(iter(comparisons.values())).values()))["differences"])
    rule = ", ".join(f"{names[key]} {margin:g}" for key, margin in margins.items())
    lines = [
        f"MaxEnt is ahead / behind an arm when it is above / below it on every one of the {seeds} seed(s) by more "
        f"than the margin ({rule}), level otherwise (within the margin, or ahead on some seeds and behind on others); "
        "this describes these paired runs, it is no significance test."
    ]
    for other, figures in comparisons.items():
        parts = []
        for key, figure in figures.items():
            low, high = min(figure["differences"]), max(figure["differences"])
            spread = f"{low:+.3f}" if seeds == 1 else f"{low:+.3f} to {high:+.3f}"
            prefix = "" if parts else "MaxEnt minus it per seed: "
            parts.append(f"{figure['verdict']} on {names[key]} ({prefix}{spread})")
        lines.append(f"Against {labels[other]}, MaxEnt is " + " and ".join(parts) + ".")
    return lines
