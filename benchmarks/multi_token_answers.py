"""Multi-token answers: an exact derivation, then one of several correct answers; MaxEnt against TRL's entropy options.

The claim tested: where a completion is a multi-token derivation that must be exact, followed by a final answer with
several correct values, MaxEnt's answer-level objective (listwise weights over distinct final answers, the mode key
``last_line``) keeps more correct answers than TRL's token-level options, because a token-entropy bonus pushes every
derivation token toward noise as much as the answer, while MaxEnt spreads weight over distinct correct answers and
leaves the derivation sharp.

Task (`maxent_grpo_experiments.digit_derivations`): a prompt "abc:" (three digits, a + b + c <= 18) asks for the
derivation "a+b+c=ss" (the sum on two digits), a newline and two digits whose sum is s: "347:" -> "3+4+7=14\\n59".
Eleven characters and the EOS token make twelve tokens (one character, one token); reward 1.0 only when the
derivation is exact and the answer correct (1 to 10 correct answers: graded difficulty, at least 4 for most prompts).
797 prompts are trained on, 38 held out: the 4 prompts of the hardest sums, 0 and 1 (one or two answers, and a sum no
training derivation ends in), and two of every other sum.

Base model: per seed, the tiny offline Qwen2 model (`maxent_grpo.tiny_model`, hidden size 64, one layer, character
tokenizer over the digits, "+", "=", ":" and the newline) is pre-trained in-process by a short supervised run
(300 AdamW steps, `SETUP`; loss on the completion and its EOS) on a synthetic corpus of the training prompts: 80%
exact derivations followed by a correct answer with a Zipf preference in an order drawn per prompt, 20% wrong (half a
slip in the sum followed by an answer to the wrong sum, half the right derivation and a wrong answer). It solves
prompts sometimes, held-out ones too, with broad but imperfect coverage.

From that base, with the same budget (``--steps`` optimizer steps of ``--prompts-per-step`` prompts x 8 completions of
at most 12 tokens, learning rate 5e-4 with TRL's linear decay, beta 0, temperature 1): the TRL arms of
`maxent_grpo_experiments.trl_baselines` (stock GRPO; a fixed ``entropy_coef``, the best of ``--entropy-grid`` by
`maxent_grpo_experiments.entropy_grid`: the most distinct correct answers per held-out prompt among the coefficients
whose training reward is within 0.01 of GRPO's, on the same seeds, the whole grid reported; TRL's adaptive entropy
bonus; ``top_entropy_quantile=0.2``) and MaxEnt listwise with the config defaults (only ``maxent_objective="listwise"``
and ``maxent_mode_key="last_line"`` set, plus any ``--maxent FIELD=VALUE`` override). Runs are interleaved per seed in
one process so machine drift hits all; eleven seeds by default, MaxEnt's difference to each other method taken seed by
seed (paired: the runs of a seed share its base model), every figure with its 95% t interval over seeds
(`maxent_grpo_experiments.over_seeds`). A fresh-seed check runs on seeds no setting was chosen on: ``--first-seed 40
--seeds 8`` with ``--entropy-grid C`` (C the coefficient chosen on seeds 0 to 10), or with the whole grid chosen again
on those seeds (the committed check, ``benchmarks/results/multi_token_answers_fresh``; it favours the fixed bonus).

After training, ``--samples`` (n) completions per held-out prompt are sampled from every model and graded on their
tokens (a completion must stop with EOS after the answer); with c of them correct, pass@k = 1 - C(n - c, k) / C(n, k)
(`maxent_grpo_experiments.pass_at_k`), averaged over the held-out prompts, for k = 1, 4, 16, 64, 256, along with the
distinct correct answers per held-out prompt among the n and the derivation accuracy (the share of samples whose
derivation is exact). Each prompt's exact probability p of a correct completion is also read off the logits (the sum
over its correct answers of P(derivation, newline, answer, EOS)), which gives the model's own pass@k, 1 - (1 - p)^k,
free of sampling noise ("exact"). The training reward curve is the mean reward of each step's scored groups.

    python benchmarks/multi_token_answers.py [--seeds 11] [--first-seed 0] [--steps 128] [--prompts-per-step 8]
                                             [--samples 512] [--methods ...] [--entropy-grid C ...]
                                             [--maxent FIELD=VALUE ...] [--output-dir DIR | --update-results]

It writes ``multi_token_answers.json`` (the schema of ``reasoning_boundary.json``: settings; per method
``pass_at_k`` / ``exact_pass_at_k``, k as a string -> mean over seeds, with the per-seed values and the 95% interval,
``distinct_correct``, ``derivation_accuracy`` and ``final_training_reward`` likewise; ``maxent_minus``: MaxEnt minus
each other method paired by seed, per k and per other figure, with its 95% interval; ``entropy_grid``: the grid's
figures and the chosen coefficient; every run; mean reward curves) and ``multi_token_answers.png`` (training reward;
held-out pass@k against k with 95% bands; the same zoomed on k >= 16) into the output directory
(``outputs/benchmarks/multi_token_answers`` by default; ``--update-results`` replaces the committed
``benchmarks/results/multi_token_answers``) and prints the tables: pass@k sampled, exact, the entropy grid, MaxEnt
minus each method paired by seed, and one sentence per TRL arm (ahead / level / behind).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from maxent_grpo.rewards import completion_text
from maxent_grpo_experiments.digit_derivations import (
    correct_answers,
    correct_completions,
    grade,
    heldout_prompts,
    sample_corpus,
    training_prompts,
)
from maxent_grpo_experiments.held_out_experiment import HeldOutTask, run_benchmark
from maxent_grpo_experiments.held_out_options import HeldOutCommand
from maxent_grpo_experiments.held_out_report import figure_cell
from maxent_grpo_experiments.held_out_setup import KS, HeldOutSetup
from maxent_grpo_experiments.pass_at_k import mean_pass_at_k

NUM_GENERATIONS = 8
LEARNING_RATE = 5e-4

#: The tiny model over the digits, "+", "=", ":" and the newline, completions of twelve tokens that end with EOS (the
#: derivation's eight characters, the newline, the answer's two), and the base model's supervised run.
SETUP = HeldOutSetup(
    alphabet="0123456789+=:\n",
    hidden_size=64,
    num_layers=1,
    completion_length=12,
    corpus_prompts=training_prompts(),
    sample_corpus=sample_corpus,
    corpus={"per_prompt": 16, "wrong_fraction": 0.2, "zipf_exponent": 1.0},
    correct_completions=correct_completions,
    stops=True,
    pretrain_steps=300,
)

COMMAND = HeldOutCommand(
    script=__file__,
    docstring=__doc__,
    steps=128,
    samples=512,
    samples_help=f"completions sampled per held-out prompt (n >= {max(KS)})",
    maxent_example="entropy_coef=0.05",
)

#: The run figures besides pass@k that the summary and the paired differences give.
FIGURES = ("distinct_correct", "derivation_accuracy", "final_training_reward")


def derivation_reward(completions: list, prompts: list, **kwargs: Any) -> list[float]:
    """1.0 when the completion is exactly the prompt's derivation, a newline and a correct answer; else 0.0."""
    pairs = zip(prompts, completions, strict=True)
    return [float(grade(completion_text(p), completion_text(c)).correct) for p, c in pairs]


def evaluate(prompts: Sequence[str], completions: Sequence[Sequence[str]]) -> dict[str, Any]:
    """Mean pass@k over ``prompts`` for every k of `KS`, distinct correct answers per prompt (count and share of the
    prompt's answers), derivation accuracy (the share of completions whose derivation is exact, mean over prompts),
    and per prompt the number of correct completions, so that a prompt no sample solves is named."""
    counts, distinct, share, exact = [], [], [], []
    for prompt, group in zip(prompts, completions, strict=True):
        grades = [grade(prompt, text) for text in group]
        answers = {text.rpartition("\n")[2] for text, g in zip(group, grades, strict=True) if g.correct}
        counts.append((len(group), sum(g.correct for g in grades)))
        distinct.append(len(answers))
        share.append(len(answers) / len(correct_answers(prompt)))
        exact.append(statistics.fmean(g.derivation_exact for g in grades))
    return {
        "pass_at_k": {str(k): mean_pass_at_k(counts, k) for k in KS},
        "distinct_correct": statistics.fmean(distinct),
        "distinct_correct_share": statistics.fmean(share),
        "derivation_accuracy": statistics.fmean(exact),
        "correct_per_prompt": {prompt: c for prompt, (_, c) in zip(prompts, counts, strict=True)},
    }


def task() -> HeldOutTask:
    """The task, with the settings of the module's constants."""
    return HeldOutTask(
        setup=SETUP,
        reward=derivation_reward,
        evaluate=evaluate,
        training_prompts=training_prompts(),
        num_generations=NUM_GENERATIONS,
        learning_rate=LEARNING_RATE,
        figures=FIGURES,
        summary_keys=("pass_at_k", "exact_pass_at_k", *FIGURES, "distinct_correct_share"),
        grid_figures=("pass_at_k", "exact_pass_at_k", "derivation_accuracy"),
        progress=(("distinct correct", "distinct_correct", ".2f"), ("derivation", "derivation_accuracy", ".3f")),
        intro="held-out prompts: {prompts}, n = {samples} samples each; distinct = distinct correct answers per "
        "prompt; derivation = share of samples whose derivation is exact",
        columns=(
            ("distinct", 10, figure_cell("distinct_correct", digits=2)),
            ("derivation", 12, figure_cell("derivation_accuracy")),
        ),
        minus=(
            ("pass@1", "pass_at_k", 1),
            ("pass@16", "pass_at_k", 16),
            ("pass@256", "pass_at_k", 256),
            ("exact pass@256", "exact_pass_at_k", 256),
            ("distinct", "distinct_correct", None),
            ("derivation", "derivation_accuracy", None),
        ),
        title="exact derivation, then two digits of its sum: {training} training prompts, {heldout} held out",
        name_width=23,
        recorded={"completion_length": SETUP.completion_length},
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the experiment, print the tables, write the JSON and the PNG; return the JSON's content."""
    return run_benchmark(COMMAND.name, task(), COMMAND.parse_args(argv, KS), heldout_prompts())


if __name__ == "__main__":
    main()
