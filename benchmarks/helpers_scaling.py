"""How the generation helpers scale with batch size.

Runs the full helper chain of one generation step (seed -> append -> retry -> truncate -> drop empty -> drop
incomplete -> flatten) on 1k, 10k and 100k prompts x 8 completions. The generator is a stand-in backend that leaves
10% of the requested slots missing on every call (fixed seed, so every run does the same work), which makes the retry
loop do real rounds. Like a real backend's output, its completion texts and their metadata (with a
``to_trl_payload`` method the flattening calls for every completion) exist before the helpers see them; the stand-in
hands out groups from a small pool so that the table measures the helpers rather than the stand-in's own allocations.
Each size is measured 3 times in one process and the best time is kept.

Importing the package root also imports torch, transformers and trl, whose objects make one full garbage collection
cost hundreds of milliseconds. That cost belongs to the process, not to the helpers: it lands on whichever batch
happens to trigger a full collection, so at 100k prompts it would dominate the table. The benchmark therefore times one
full collection, prints it, and moves the import-time objects out of the collector's way with ``gc.freeze()`` before
measuring. The collector stays enabled, so the collections caused by the chain's own objects are measured.

Run it from the repository root::

    python benchmarks/helpers_scaling.py

It prints the cost of a full collection of the import-time heap, a table of total time and time per completion
(microseconds) per size, then the ratios of per-completion cost at 10k and 100k against 1k. Expect the ratios to stay
close to 1 (the helpers do linear work; the target is 100k/1k <= 1.5) and the 100k x 8 chain to take well under 2 s on
a 2-core machine. Times are wall-clock: run it on an otherwise idle machine, because a long run cannot dodge other
processes the way a 5 ms one can, which inflates the ratios.
"""

from __future__ import annotations

import gc
import random
import time
from dataclasses import dataclass
from typing import Any

from maxent_grpo.training.generation.helpers import (
    AggregatedGenerationState,
    GenerationBatch,
    append_completion_group,
    drop_empty_prompt_groups,
    drop_incomplete_prompt_groups,
    flatten_prompt_completions,
    retry_incomplete_prompts,
    seed_generation_groups,
    truncate_to_expected_counts,
)

SIZES = (1_000, 10_000, 100_000)
GENERATIONS = 8
REPEATS = 3
MISSING_FRACTION = 0.1
SEED = 0


@dataclass(frozen=True, slots=True)
class _Payload:
    """Stand-in for a backend's per-completion metadata, holding a payload built when it was generated."""

    payload: dict[str, Any]

    def to_trl_payload(self) -> dict[str, Any]:
        return self.payload


class _LossyGenerator:
    """Generator that returns each requested slot with probability 0.9, deterministically.

    Groups come from a pool indexed by size (the helpers only read the groups they are given), so the stand-in
    allocates nothing per completion.
    """

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed).random
        texts = [f"completion {slot}" for slot in range(GENERATIONS)]
        meta = [_Payload({"slot": slot}) for slot in range(GENERATIONS)]
        self._text_groups = [texts[:size] for size in range(GENERATIONS + 1)]
        self._meta_groups: list[list[object | None]] = [meta[:size] for size in range(GENERATIONS + 1)]

    def __call__(
        self, prompts: list[str], expected_generations: int, deficits: list[int] | None
    ) -> tuple[list[list[str]], list[list[object | None]]]:
        counts = deficits if deficits is not None else [expected_generations] * len(prompts)
        rnd = self._random
        kept = [sum(rnd() >= MISSING_FRACTION for _ in range(count)) for count in counts]
        return [self._text_groups[k] for k in kept], [self._meta_groups[k] for k in kept]


def run_chain(prompt_count: int) -> tuple[float, int]:
    """Run the helper chain once; return (seconds, flattened completions)."""
    prompts = [f"prompt {idx}" for idx in range(prompt_count)]
    answers = [f"answer {idx}" for idx in range(prompt_count)]
    generator = _LossyGenerator(SEED)
    stats: dict[str, int] = {}

    start = time.perf_counter()
    comps, meta = seed_generation_groups(prompt_count, None, None)
    groups, meta_groups = generator(prompts, GENERATIONS, [GENERATIONS] * prompt_count)
    for idx, (group, meta_group) in enumerate(zip(groups, meta_groups, strict=True)):
        meta = append_completion_group(comps, meta, idx, group, meta_group)
    state = retry_incomplete_prompts(
        prompts, generator, GENERATIONS, AggregatedGenerationState(comps, meta), None, generation_stats=stats
    )
    comps, meta, _ = truncate_to_expected_counts(state.completions, state.metadata, GENERATIONS)
    kept_prompts, kept_answers, comps, meta = drop_empty_prompt_groups(prompts, answers, comps, meta, stats)
    kept_prompts, kept_answers, comps, meta, _ = drop_incomplete_prompt_groups(
        kept_prompts, kept_answers, comps, meta, GENERATIONS, stats
    )
    flat, _ = flatten_prompt_completions(GenerationBatch(kept_prompts, kept_answers, comps, meta))
    elapsed = time.perf_counter() - start
    return elapsed, len(flat.completions)


def main() -> None:
    start = time.perf_counter()
    gc.collect()
    collect_ms = (time.perf_counter() - start) * 1e3
    print(f"full collection of the import-time heap: {collect_ms:.0f} ms (frozen before timing)")
    gc.freeze()
    per_completion_us: dict[int, float] = {}
    print(f"{'prompts':>8} {'completions':>12} {'kept':>9} {'total ms':>10} {'us/completion':>14}")
    for size in SIZES:
        best, kept = min(run_chain(size) for _ in range(REPEATS))
        completions = size * GENERATIONS
        per_completion_us[size] = best / completions * 1e6
        print(f"{size:>8} {completions:>12} {kept:>9} {best * 1e3:>10.1f} {per_completion_us[size]:>14.3f}")
    base = per_completion_us[SIZES[0]]
    for size in SIZES[1:]:
        print(f"per-completion cost ratio {size // 1000}k/{SIZES[0] // 1000}k: {per_completion_us[size] / base:.2f}")


if __name__ == "__main__":
    main()
