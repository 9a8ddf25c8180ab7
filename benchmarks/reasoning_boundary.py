"""The reasoning boundary: held-out pass@k of a pretrained base, and of GRPO, TRL's entropy options and MaxEnt from it.

Task (`maxent_grpo_experiments.digit_sums`): a prompt "ab=" asks for two digits that sum to a + b; one to ten of the
hundred two-digit answers are correct (graded difficulty: one for "00=", ten for a sum of 9). 76 prompts are trained
on; 24 are held out: 20 that share the training prompts' sums, and the 6 prompts of the hardest sums (0, 1, 17, 18: one
or two answers), whose answers no training prompt has (two of them are among the 20).

Base model: per seed, the tiny offline Qwen2 model (`maxent_grpo.tiny_model`, hidden size 64, one layer, character
tokenizer over the digits and "=") is pre-trained in-process by a short supervised run (300 AdamW steps, `SETUP`)
on a synthetic corpus of the training prompts: 70% correct answers with a Zipf preference in an order drawn per
prompt, 30% random wrong pairs. It solves prompts sometimes, held-out ones too, with broad but imperfect coverage.

From that base, with the same budget (``--steps`` optimizer steps of ``--prompts-per-step`` prompts x 8 completions of
2 tokens, learning rate 1e-3 with TRL's linear decay, beta 0, temperature 1): the TRL arms of
`maxent_grpo_experiments.trl_baselines`: stock TRL GRPO; GRPO with a fixed token-entropy bonus, ``entropy_coef`` the
best of ``--entropy-grid`` (default 0.01 0.02 0.05 0.1: the most distinct correct answers per held-out prompt among the
coefficients whose training reward is within 0.01 of GRPO's, on the same seeds, by
`maxent_grpo_experiments.entropy_grid`; the whole grid is reported; ``--first-seed 11 --entropy-grid C``, C the chosen
coefficient, checks it on fresh seeds); GRPO with TRL's adaptive entropy bonus (``entropy_coef=0.01``,
``use_adaptive_entropy=True``, ``entropy_target=1.0``, ``entropy_coef_max=0.1``); GRPO on the top 20% tokens by entropy
(``top_entropy_quantile=0.2``); and MaxEnt listwise with the config defaults (only ``maxent_objective="listwise"`` and
``maxent_mode_key="last_line"`` set, plus any ``--maxent FIELD=VALUE`` override). Runs are interleaved per seed in one
process so machine drift hits all. Eleven seeds by default: from one seed to the next, a method's held-out pass@1 moves
by 0.02 to 0.05 (standard deviation) and its pass@256 by 0.01 to 0.02, as much as most differences between methods, so
three seeds cannot tell them apart. Every pass@k comes with its 95% t interval over seeds (not clipped to [0, 1]), and
MaxEnt's difference to each other method is taken seed by seed (paired: the runs of a seed share its base model;
`maxent_grpo_experiments.over_seeds`).

After training, ``--samples`` (n, default 1024) answers per held-out prompt are sampled from every model; with c of
them correct, pass@k = 1 - C(n - c, k) / C(n, k) (Chen et al. 2021, `maxent_grpo_experiments.pass_at_k`), averaged over
the held-out prompts, for k = 1, 4, 16, 64, 256, the distinct correct answers per held-out prompt among the n, and
every prompt's c (a prompt with c = 0, which no sample solved, is named in the run's printed line). Because an answer
is two tokens, each prompt's exact probability p of a correct sample is also read off the model's logits, which gives
the model's own pass@k, 1 - (1 - p)^k, free of sampling noise ("exact"; a prompt solved with p = 0.003 is solved by
256 samples about half the time, and with a fixed sampling seed runs of close models tend to miss it together). The
training reward curve is the mean reward of each step's scored groups.

    python benchmarks/reasoning_boundary.py [--seeds 11] [--first-seed 0] [--steps 500] [--samples 1024]
                                            [--methods ...] [--entropy-grid C ...] [--maxent FIELD=VALUE ...]
                                            [--output-dir DIR | --update-results]

It writes ``reasoning_boundary.json`` (settings; per method ``pass_at_k``, k as a string -> mean over seeds, with the
per-seed values and the 95% t interval over seeds, ``exact_pass_at_k`` likewise, distinct correct answers and the final
training reward likewise; ``maxent_minus``: MaxEnt minus each other method per k and per other figure, paired by seed,
with its 95% interval; ``entropy_grid``: the grid's figures and the chosen coefficient; every run, with its per-prompt
counts and probabilities; mean reward curves) and ``reasoning_boundary.png`` (training reward; held-out pass@k against
k with 95% bands; the same zoomed on k >= 16) into the output directory (``outputs/benchmarks/reasoning_boundary`` by
default; ``--update-results`` replaces the committed ``benchmarks/results/reasoning_boundary``, which
docs/benchmarks/reasoning-boundary.md shows) and prints the tables: pass@k sampled, exact, the entropy grid, MaxEnt
minus each method paired by seed, and one sentence per TRL arm (ahead / level / behind).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from maxent_grpo.rewards import completion_text
from maxent_grpo_experiments.digit_sums import (
    correct_answers,
    heldout_prompts,
    is_correct,
    sample_corpus,
    training_prompts,
)
from maxent_grpo_experiments.held_out_experiment import HeldOutTask, run_benchmark
from maxent_grpo_experiments.held_out_options import HeldOutCommand
from maxent_grpo_experiments.held_out_report import figure_cell
from maxent_grpo_experiments.held_out_setup import KS, HeldOutSetup
from maxent_grpo_experiments.pass_at_k import mean_pass_at_k

NUM_GENERATIONS = 8
LEARNING_RATE = 1e-3

#: The tiny model over the digits and "=", answers of two tokens without EOS, and the base model's supervised run.
SETUP = HeldOutSetup(
    alphabet="0123456789=",
    hidden_size=64,
    num_layers=1,
    completion_length=2,
    corpus_prompts=training_prompts(),
    sample_corpus=sample_corpus,
    corpus={"per_prompt": 64, "wrong_fraction": 0.3, "zipf_exponent": 1.0},
    correct_completions=correct_answers,
    stops=False,
    pretrain_steps=300,
)

COMMAND = HeldOutCommand(
    script=__file__,
    docstring=__doc__,
    steps=500,
    samples=1024,
    samples_help=f"answers sampled per held-out prompt (n >= {max(KS)})",
    maxent_example="maxent_mode_probability=policy",
)

#: The run figures besides pass@k that the summary and the paired differences give.
FIGURES = ("distinct_correct", "final_training_reward")


def digit_sum_reward(completions: list, prompts: list, **kwargs: Any) -> list[float]:
    """1.0 when the completion, whitespace stripped, is two digits that sum to the prompt's two digits; else 0.0."""
    return [
        float(is_correct(completion_text(p), completion_text(c))) for p, c in zip(prompts, completions, strict=True)
    ]


def evaluate(prompts: Sequence[str], answers: Sequence[Sequence[str]]) -> dict[str, Any]:
    """Mean pass@k over ``prompts`` for every k of `KS`, distinct correct answers per prompt (count and share), and
    per prompt the number of correct samples, so that a prompt no sample solves is named."""
    counts, distinct, share = [], [], []
    for prompt, group in zip(prompts, answers, strict=True):
        correct = {a.strip() for a in group if is_correct(prompt, a)}
        counts.append((len(group), sum(is_correct(prompt, a) for a in group)))
        distinct.append(len(correct))
        share.append(len(correct) / len(correct_answers(prompt)))
    return {
        "pass_at_k": {str(k): mean_pass_at_k(counts, k) for k in KS},
        "distinct_correct": statistics.fmean(distinct),
        "distinct_correct_share": statistics.fmean(share),
        "correct_per_prompt": {prompt: c for prompt, (_, c) in zip(prompts, counts, strict=True)},
    }


def task() -> HeldOutTask:
    """The task, with the settings of the module's constants."""
    return HeldOutTask(
        setup=SETUP,
        reward=digit_sum_reward,
        evaluate=evaluate,
        training_prompts=training_prompts(),
        num_generations=NUM_GENERATIONS,
        learning_rate=LEARNING_RATE,
        figures=FIGURES,
        summary_keys=(
            "pass_at_k",
            "exact_pass_at_k",
            "distinct_correct",
            "distinct_correct_share",
            "final_training_reward",
        ),
        grid_figures=("pass_at_k", "exact_pass_at_k"),
        progress=(("distinct correct", "distinct_correct", ".2f"),),
        intro="held-out prompts: {prompts}, n = {samples} samples each; distinct = distinct correct per prompt",
        columns=(("distinct", 10, figure_cell("distinct_correct", digits=2)),),
        minus=(
            ("pass@1", "pass_at_k", 1),
            ("pass@256", "pass_at_k", 256),
            ("exact pass@256", "exact_pass_at_k", 256),
            ("distinct", "distinct_correct", None),
        ),
        title="two digits summing to a + b: {training} training prompts, {heldout} held out",
        name_width=17,
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the experiment, print the tables, write the JSON and the PNG; return the JSON's content."""
    return run_benchmark(COMMAND.name, task(), COMMAND.parse_args(argv, KS), heldout_prompts())


if __name__ == "__main__":
    main()
