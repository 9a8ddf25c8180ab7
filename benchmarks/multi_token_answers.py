"""Multi-token answers: an exact derivation, then one of several correct answers; MaxEnt against TRL's entropy options.

The claim tested: where a completion is a multi-token derivation that must be exact, followed by a final answer with
several correct values, MaxEnt's answer-level objective (listwise weights over distinct final answers, the mode key
``last_line``) keeps more correct answers than TRL's token-level options, because a token-entropy bonus pushes every
derivation token toward noise as much as the answer, while MaxEnt spreads weight over distinct correct answers and
leaves the derivation sharp.

Task (`maxent_grpo.bench.digit_derivations`): a prompt "abc:" (three digits, a + b + c <= 18) asks for the
derivation "a+b+c=ss" (the sum on two digits), a newline and two digits whose sum is s: "347:" -> "3+4+7=14\\n59".
Eleven characters and the EOS token make twelve tokens (one character, one token); reward 1.0 only when the
derivation is exact and the answer correct (1 to 10 correct answers: graded difficulty, at least 4 for most prompts).
797 prompts are trained on, 38 held out: the 4 prompts of the hardest sums, 0 and 1 (one or two answers, and a sum no
training derivation ends in), and two of every other sum.

Base model: per seed, the tiny offline Qwen2 model (`maxent_grpo.tiny_model`, hidden size 64, one layer, character
tokenizer over the digits, "+", "=", ":" and the newline) is pre-trained in-process by a short supervised run
(`PRETRAIN_STEPS` AdamW steps, loss on the completion and its EOS) on a synthetic corpus of the training prompts: 80%
exact derivations followed by a correct answer with a Zipf preference in an order drawn per prompt, 20% wrong (half a
slip in the sum followed by an answer to the wrong sum, half the right derivation and a wrong answer). It solves
prompts sometimes, held-out ones too, with broad but imperfect coverage.

From that base, with the same budget (``--steps`` optimizer steps of ``--prompts-per-step`` prompts x 8 completions of
at most 12 tokens, learning rate 5e-4 with TRL's linear decay, beta 0, temperature 1): the TRL arms of
`maxent_grpo.bench.trl_baselines` (stock GRPO; a fixed ``entropy_coef``, the best of ``--entropy-grid`` by
`maxent_grpo.bench.entropy_grid`: the most distinct correct answers per held-out prompt among the coefficients whose
training reward is within 0.01 of GRPO's, on the same seeds, the whole grid reported; TRL's adaptive entropy bonus;
``top_entropy_quantile=0.2``) and MaxEnt listwise with the config defaults (only ``maxent_objective="listwise"`` and
``maxent_mode_key="last_line"`` set, plus any ``--maxent FIELD=VALUE`` override). Runs are interleaved per seed in one
process so machine drift hits all; eleven seeds by default, MaxEnt's difference to each other method taken seed by seed
(paired: the runs of a seed share its base model), every figure with its 95% t interval over seeds
(`maxent_grpo.bench.over_seeds`). A fresh-seed check runs on seeds no setting was chosen on: ``--first-seed 40
--seeds 8`` with ``--entropy-grid C`` (C the coefficient chosen on seeds 0 to 10), or with the whole grid chosen again
on those seeds (the committed check, ``benchmarks/results/multi_token_answers_fresh``; it favours the fixed bonus).

After training, ``--samples`` (n) completions per held-out prompt are sampled from every model and graded on their
tokens (a completion must stop with EOS after the answer); with c of them correct, pass@k = 1 - C(n - c, k) / C(n, k)
(`maxent_grpo.bench.pass_at_k`), averaged over the held-out prompts, for k = 1, 4, 16, 64, 256, along with the distinct
correct answers per held-out prompt among the n and the derivation accuracy (the share of samples whose derivation is
exact). Each prompt's exact probability p of a correct completion is also read off the logits (the sum over its
correct answers of P(derivation, newline, answer, EOS)), which gives the model's own pass@k, 1 - (1 - p)^k, free of
sampling noise ("exact"). The training reward curve is the mean reward of each step's scored groups.

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

import argparse
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from maxent_grpo.bench import held_out
from maxent_grpo.bench.digit_derivations import (
    correct_answers,
    correct_completions,
    grade,
    heldout_prompts,
    sample_corpus,
    training_prompts,
)
from maxent_grpo.bench.from_base import pretrain_base as pretrain
from maxent_grpo.bench.held_out_experiment import HeldOutTask, run_benchmark
from maxent_grpo.bench.held_out_options import parse_held_out_args
from maxent_grpo.bench.held_out_report import figure_cell
from maxent_grpo.bench.pass_at_k import mean_pass_at_k
from maxent_grpo.rewards import completion_text
from maxent_grpo.tiny_model import build_tiny_tokenizer

COMMITTED_OUTPUT_DIR = Path(__file__).resolve().parent / "results" / "multi_token_answers"
KS = (1, 4, 16, 64, 256)
ALPHABET = "0123456789+=:\n"
HIDDEN_SIZE = 64
NUM_LAYERS = 1
#: Tokens of a completion: the derivation's eight characters, the newline, the answer's two, and EOS.
COMPLETION_LENGTH = 12
NUM_GENERATIONS = 8
LEARNING_RATE = 5e-4

#: The base model's supervised run: corpus per training prompt, its wrong share and skew, steps and batch.
CORPUS = {"per_prompt": 16, "wrong_fraction": 0.2, "zipf_exponent": 1.0}
PRETRAIN_STEPS = 300
PRETRAIN_BATCH = 256
PRETRAIN_LR = 3e-3

#: The run figures besides pass@k that the summary and the paired differences give.
FIGURES = ("distinct_correct", "derivation_accuracy", "final_training_reward")


def derivation_reward(completions: list, prompts: list, **kwargs: Any) -> list[float]:
    """1.0 when the completion is exactly the prompt's derivation, a newline and a correct answer; else 0.0."""
    pairs = zip(prompts, completions, strict=True)
    return [float(grade(completion_text(p), completion_text(c)).correct) for p, c in pairs]


def pretrain_base(tokenizer: PreTrainedTokenizerBase, seed: int) -> PreTrainedModel:
    """The seed's base model: the tiny model after a short supervised run on the corpus (loss on the completion and
    its EOS)."""
    return pretrain(
        tokenizer,
        sample_corpus(training_prompts(), seed=seed, **CORPUS),
        seed=seed,
        hidden_size=HIDDEN_SIZE,
        num_layers=NUM_LAYERS,
        completion_length=COMPLETION_LENGTH,
        steps=PRETRAIN_STEPS,
        batch=PRETRAIN_BATCH,
        learning_rate=PRETRAIN_LR,
        append_eos=True,
    )


def sample(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str], n: int, seed: int
) -> list[list[str]]:
    """``n`` completions per prompt at temperature 1, up to the first EOS, other special tokens kept by name (so a
    completion is correct only if its tokens spell a correct one and then stop)."""
    return held_out.sample(
        model, tokenizer, prompts, n, seed, max_new_tokens=COMPLETION_LENGTH, keep_special_tokens=True
    )


def correct_probabilities(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str]
) -> list[float]:
    """Per prompt, the exact probability of sampling a correct completion: the sum over its correct answers of
    P(derivation, newline, answer, EOS | prompt)."""
    return held_out.correct_probabilities(model, tokenizer, prompts, correct_completions, append_eos=True)


def exact_pass_at_k(probabilities: Sequence[float]) -> dict[str, float]:
    """Mean over prompts of the model's own pass@k, ``1 - (1 - p) ** k``, for every k of `KS`."""
    return held_out.exact_pass_at_k(probabilities, KS)


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
        pretrain_base=pretrain_base,
        reward=derivation_reward,
        sample=sample,
        correct_probabilities=correct_probabilities,
        exact_pass_at_k=exact_pass_at_k,
        evaluate=evaluate,
        training_prompts=training_prompts(),
        ks=KS,
        num_generations=NUM_GENERATIONS,
        completion_length=COMPLETION_LENGTH,
        learning_rate=LEARNING_RATE,
        model={"hidden_size": HIDDEN_SIZE, "num_layers": NUM_LAYERS, "alphabet": ALPHABET},
        pretrain={**CORPUS, "steps": PRETRAIN_STEPS, "batch": PRETRAIN_BATCH, "learning_rate": PRETRAIN_LR},
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
        recorded={"completion_length": COMPLETION_LENGTH},
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    return parse_held_out_args(
        argv,
        description=__doc__.splitlines()[0],
        name="multi_token_answers",
        committed=COMMITTED_OUTPUT_DIR,
        ks=KS,
        steps=128,
        samples=512,
        samples_help=f"completions sampled per held-out prompt (n >= {max(KS)})",
        maxent_example="entropy_coef=0.05",
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the experiment, print the tables, write the JSON and the PNG; return the JSON's content."""
    args = parse_args(argv)
    return run_benchmark("multi_token_answers", task(), args, build_tiny_tokenizer(ALPHABET), heldout_prompts())


if __name__ == "__main__":
    torch.set_num_threads(1)  # the model is tiny: more threads only add contention on a small machine
    main()
