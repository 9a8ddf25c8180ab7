"""The reasoning boundary: held-out pass@k of a pretrained base, and of GRPO, TRL's entropy options and MaxEnt from it.

Task (`maxent_grpo.bench.digit_sums`): a prompt "ab=" asks for two digits that sum to a + b; one to ten of the hundred
two-digit answers are correct (graded difficulty: one for "00=", ten for a sum of 9). 76 prompts are trained on; 24
are held out: 20 that share the training prompts' sums, and the 6 prompts of the hardest sums (0, 1, 17, 18: one or
two answers), whose answers no training prompt has (two of them are among the 20).

Base model: per seed, the tiny offline Qwen2 model (`maxent_grpo.tiny_model`, hidden size 64, one layer, character
tokenizer over the digits and "=") is pre-trained in-process by a short supervised run (`PRETRAIN_STEPS` AdamW steps)
on a synthetic corpus of the training prompts: 70% correct answers with a Zipf preference in an order drawn per
prompt, 30% random wrong pairs. It solves prompts sometimes, held-out ones too, with broad but imperfect coverage.

From that base, with the same budget (``--steps`` optimizer steps of ``--prompts-per-step`` prompts x 8 completions of
2 tokens, learning rate 1e-3 with TRL's linear decay, beta 0, temperature 1): stock TRL GRPO; GRPO with TRL's
adaptive entropy bonus (``entropy_coef=0.01``, ``use_adaptive_entropy=True``, ``entropy_target=1.0``,
``entropy_coef_max=0.1``); GRPO on the top 20% tokens by entropy (``top_entropy_quantile=0.2``); and MaxEnt
listwise with the config defaults (only ``maxent_objective="listwise"`` and ``maxent_mode_key="last_line"`` set, plus
any ``--maxent FIELD=VALUE`` override). Runs are interleaved per seed in one process so machine drift hits all.
Eleven seeds by default: from one seed to the next, a method's held-out pass@1 moves by 0.02 to 0.05 (standard
deviation) and its pass@256 by 0.01 to 0.02, as much as most differences between methods, so three seeds cannot tell
them apart. Every pass@k comes with its 95% t interval over seeds (not clipped to [0, 1]), and MaxEnt's difference to
each other method is taken seed by seed (paired: the runs of a seed share its base model).

After training, ``--samples`` (n, default 1024) answers per held-out prompt are sampled from every model; with c of
them correct, pass@k = 1 - C(n - c, k) / C(n, k) (Chen et al. 2021, `maxent_grpo.bench.pass_at_k`), averaged over the
held-out prompts, for k = 1, 4, 16, 64, 256, the distinct correct answers per held-out prompt among the n, and every
prompt's c (a prompt with c = 0, which no sample solved, is named in the run's printed line). Because an answer is
two tokens, each prompt's exact probability p of a correct sample is also read off the model's logits, which gives
the model's own pass@k, 1 - (1 - p)^k, free of sampling noise ("exact"; a prompt solved with p = 0.003 is solved by
256 samples about half the time, and with a fixed sampling seed runs of close models tend to miss it together). The
training reward curve is the mean reward of each step's scored groups.

    python benchmarks/reasoning_boundary.py [--seeds 11] [--first-seed 0] [--steps 500] [--samples 1024]
                                            [--methods ...] [--maxent FIELD=VALUE ...]
                                            [--output-dir DIR | --update-results]

It writes ``reasoning_boundary.json`` (settings; per method ``pass_at_k``, k as a string -> mean over seeds, with the
per-seed values and the 95% t interval over seeds, ``exact_pass_at_k`` likewise, distinct correct answers and the final
training reward; ``maxent_minus``: MaxEnt minus each other method per k, paired by seed, with its 95% interval; every
run, with its per-prompt counts and probabilities; mean reward curves) and
``reasoning_boundary.png`` (training reward; held-out pass@k against k with 95% bands; the same zoomed on k >= 16)
into the output directory (``outputs/benchmarks/reasoning_boundary`` by default; ``--update-results`` replaces the
committed ``benchmarks/results/reasoning_boundary``, which docs/benchmarks/reasoning-boundary.md shows) and prints
the tables: pass@k sampled, exact, and MaxEnt minus each method paired by seed.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch
from datasets import Dataset
from transformers import PreTrainedModel, PreTrainedTokenizerBase, PrinterCallback
from transformers.utils import logging as hf_logging
from trl import GRPOConfig, GRPOTrainer

from maxent_grpo.bench.digit_sums import correct_answers, heldout_prompts, is_correct, sample_corpus, training_prompts
from maxent_grpo.bench.output import add_output_arguments
from maxent_grpo.bench.pass_at_k import mean_pass_at_k
from maxent_grpo.bench.single_prompt import SMOOTHING_WINDOW, StepRecorder, maxent_override, smooth
from maxent_grpo.bench.stats import summarize
from maxent_grpo.config import MaxEntGRPOConfig
from maxent_grpo.rewards import completion_text
from maxent_grpo.tiny_model import build_tiny_model, build_tiny_tokenizer
from maxent_grpo.trainer import MaxEntGRPOTrainer

COMMITTED_OUTPUT_DIR = Path(__file__).resolve().parent / "results" / "reasoning_boundary"
KS = (1, 4, 16, 64, 256)
ALPHABET = "0123456789="
HIDDEN_SIZE = 64
NUM_LAYERS = 1
COMPLETION_LENGTH = 2
NUM_GENERATIONS = 8
LEARNING_RATE = 1e-3

#: The base model's supervised run: corpus per training prompt, its wrong share and skew, steps and batch.
CORPUS = {"per_prompt": 64, "wrong_fraction": 0.3, "zipf_exponent": 1.0}
PRETRAIN_STEPS = 300
PRETRAIN_BATCH = 256
PRETRAIN_LR = 3e-3

#: Per method: the trainer ("grpo": stock TRL, "maxent": MaxEntGRPOTrainer) and the config fields it adds.
METHODS: dict[str, tuple[str, dict[str, Any]]] = {
    "grpo": ("grpo", {}),
    "grpo_entropy": (
        "grpo",
        {"entropy_coef": 0.01, "use_adaptive_entropy": True, "entropy_target": 1.0, "entropy_coef_max": 0.1},
    ),
    "grpo_top_entropy": ("grpo", {"top_entropy_quantile": 0.2}),
    "maxent": ("maxent", {"maxent_objective": "listwise", "maxent_mode_key": "last_line"}),
}
LABELS = {
    "base": "base (supervised only)",
    "grpo": "GRPO (stock TRL)",
    "grpo_entropy": "GRPO + adaptive entropy_coef",
    "grpo_top_entropy": "GRPO + top_entropy_quantile=0.2",
    "maxent": "MaxEnt listwise (defaults)",
}


def digit_sum_reward(completions: list, prompts: list, **kwargs: Any) -> list[float]:
    """1.0 when the completion, whitespace stripped, is two digits that sum to the prompt's two digits; else 0.0."""
    return [
        float(is_correct(completion_text(p), completion_text(c))) for p, c in zip(prompts, completions, strict=True)
    ]


def pretrain_base(tokenizer: PreTrainedTokenizerBase, seed: int) -> PreTrainedModel:
    """The seed's base model: the tiny model after a short supervised run on the corpus (loss on the answer only)."""
    model = build_tiny_model(
        tokenizer, seed=seed, hidden_size=HIDDEN_SIZE, num_layers=NUM_LAYERS, max_completion_length=COMPLETION_LENGTH
    )
    corpus = sample_corpus(training_prompts(), seed=seed, **CORPUS)
    ids = torch.tensor([tokenizer(prompt + answer)["input_ids"] for prompt, answer in corpus])
    labels = ids.clone()
    labels[:, : ids.shape[1] - COMPLETION_LENGTH] = -100
    optimizer = torch.optim.AdamW(model.parameters(), lr=PRETRAIN_LR)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(PRETRAIN_STEPS):
        batch = torch.randint(len(corpus), (PRETRAIN_BATCH,), generator=generator)
        loss = model(input_ids=ids[batch], labels=labels[batch]).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    return model


def train(
    base: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    method: str,
    seed: int,
    args: argparse.Namespace,
    recorder: StepRecorder,
) -> PreTrainedModel:
    """A copy of ``base`` trained by ``method`` on the training prompts."""
    kind, settings = METHODS[method]
    if kind == "maxent":
        settings = {**settings, **dict(args.maxent)}
    batch = args.prompts_per_step * NUM_GENERATIONS
    with tempfile.TemporaryDirectory() as output_dir:
        fields: dict[str, Any] = {
            "output_dir": output_dir,
            "per_device_train_batch_size": batch,
            "num_generations": NUM_GENERATIONS,
            "max_completion_length": COMPLETION_LENGTH,
            "temperature": 1.0,
            "max_steps": args.steps,
            "learning_rate": LEARNING_RATE,
            "beta": 0.0,
            "logging_steps": args.steps,
            "save_strategy": "no",
            "report_to": "none",
            "use_cpu": True,
            "seed": seed,
            "dataloader_num_workers": 0,
            "disable_tqdm": True,
            **settings,
        }
        config_class, trainer_class = (
            (GRPOConfig, GRPOTrainer) if kind == "grpo" else (MaxEntGRPOConfig, MaxEntGRPOTrainer)
        )
        trainer = trainer_class(
            model=copy.deepcopy(base),
            reward_funcs=recorder,
            args=config_class(**fields),
            train_dataset=Dataset.from_dict({"prompt": list(training_prompts())}),
            processing_class=tokenizer,
        )
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    return trainer.model


@torch.no_grad()
def sample(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str], n: int, seed: int
) -> list[list[str]]:
    """``n`` answers per prompt, sampled at temperature 1 as in training; the global RNG is left untouched."""
    model.eval()
    ids = torch.tensor([tokenizer(p)["input_ids"] for p in prompts]).repeat_interleave(n, dim=0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        output = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            max_new_tokens=COMPLETION_LENGTH,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    texts = tokenizer.batch_decode(output[:, ids.shape[1] :], skip_special_tokens=True)
    return [texts[i * n : (i + 1) * n] for i in range(len(prompts))]


@torch.no_grad()
def correct_probabilities(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str]
) -> list[float]:
    """Per prompt, the exact probability that one answer sampled at temperature 1 (as `sample` does) is correct.

    An answer is two tokens, so it is the sum over the prompt's correct answers ``cd`` of ``P(c | prompt) *
    P(d | prompt c)``, read off the logits: no sampling noise, unlike a count of correct samples.
    """
    model.eval()
    rows = [(i, prompt + answer) for i, prompt in enumerate(prompts) for answer in correct_answers(prompt)]
    ids = torch.tensor([tokenizer(text)["input_ids"] for _, text in rows])
    logps = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.float().log_softmax(-1)
    answer_ids = ids[:, -COMPLETION_LENGTH:].unsqueeze(-1)
    answer_logps = logps[:, -COMPLETION_LENGTH - 1 : -1].gather(-1, answer_ids).squeeze(-1).sum(-1)
    totals = [0.0] * len(prompts)
    for (i, _), logp in zip(rows, answer_logps.tolist(), strict=True):
        totals[i] += math.exp(logp)
    return totals


def exact_pass_at_k(probabilities: Sequence[float]) -> dict[str, float]:
    """Mean over prompts of the model's own pass@k, ``1 - (1 - p) ** k``, for every k of `KS` (k samples drawn
    independently from the model, where the unbiased estimator draws them from n fixed samples)."""
    return {str(k): statistics.fmean(1 - (1 - p) ** k for p in probabilities) for k in KS}


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


def interval(values: Sequence[float]) -> list[float] | None:
    """The 95% t interval of the mean of ``values`` (one per seed); None with fewer than 2 seeds."""
    if len(values) < 2:
        return None
    arm = summarize(values)
    return [arm.ci_low, arm.ci_high]


def over_seeds(runs: Sequence[Mapping[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    """One method's ``key`` (``pass_at_k`` or ``exact_pass_at_k``) over its ``runs``, one per seed: per k the mean
    (``key``), the values (``<key>_per_seed``) and their 95% t interval (``<key>_ci95``)."""
    per_seed = {str(k): [r[key][str(k)] for r in runs] for k in KS}
    return {
        key: {k: statistics.fmean(values) for k, values in per_seed.items()},
        f"{key}_per_seed": per_seed,
        f"{key}_ci95": {k: interval(values) for k, values in per_seed.items()},
    }


def paired_differences(runs: Sequence[Mapping[str, Any]], method: str, key: str) -> dict[str, dict[str, Any]]:
    """Per other method and k, ``method``'s ``key`` (``pass_at_k`` or ``exact_pass_at_k``) minus the other's, paired
    by seed: the mean over seeds and its 95% t interval (None with one seed). Every method must have run on every
    seed ``method`` ran on, as `main` runs them.

    The runs of a seed share its base model and data order, so pairing cancels the seed's luck, which is larger
    than most of the differences between methods.
    """
    by_seed = {(r["method"], r["seed"]): r[key] for r in runs}
    seeds = sorted({r["seed"] for r in runs if r["method"] == method})
    result: dict[str, dict[str, Any]] = {}
    for other in dict.fromkeys(r["method"] for r in runs):
        if other == method:
            continue
        result[other] = {}
        for k in KS:
            diffs = [by_seed[(method, s)][str(k)] - by_seed[(other, s)][str(k)] for s in seeds]
            result[other][str(k)] = {"mean": statistics.fmean(diffs), "ci95": interval(diffs)}
    return result


def format_difference(difference: Mapping[str, Any]) -> str:
    """``+0.012 [-0.004, +0.028]``: a paired difference and its 95% interval (the mean alone with one seed)."""
    text = f"{difference['mean']:+.3f}"
    if difference["ci95"] is not None:
        low, high = difference["ci95"]
        text += f" [{low:+.3f}, {high:+.3f}]"
    return text


def method_labels(maxent_overrides: Sequence[tuple[str, Any]]) -> dict[str, str]:
    """The label of every method in tables and the plot; the MaxEnt run's names its overrides, if any (a field given
    twice shows the value that applies, the last)."""
    if not maxent_overrides:
        return dict(LABELS)
    overrides = ", ".join(f"{name}={json.dumps(value)}" for name, value in dict(maxent_overrides).items())
    return {**LABELS, "maxent": f"MaxEnt listwise ({overrides})"}


def plot(
    summary: Mapping[str, Any], curves: Mapping[str, list[list[float]]], labels: Mapping[str, str], path: Path
) -> None:
    """Left: training reward per step (mean over seeds, smoothed). Middle: held-out pass@k against k per method, with
    its 95% interval over seeds shaded. Right: the same from k = 16 on, zoomed, where the crossover is."""
    figure, (left, middle, right) = plt.subplots(1, 3, figsize=(18, 4.6))
    zoom_from = 16
    for method, figures in summary.items():
        ks = [int(k) for k in figures["pass_at_k"]]
        values = list(figures["pass_at_k"].values())
        bands = [figures["pass_at_k_ci95"][str(k)] for k in ks]
        style = "k--" if method == "base" else "-"
        for axis, shown in ((middle, ks), (right, [k for k in ks if k >= zoom_from])):
            picked = [i for i, k in enumerate(ks) if k in shown]
            (line,) = axis.plot(shown, [values[i] for i in picked], style, marker="o", label=labels[method])
            if all(bands[i] is not None for i in picked):
                low = [max(bands[i][0], 0.0) for i in picked]
                high = [min(bands[i][1], 1.0) for i in picked]
                axis.fill_between(shown, low, high, color=line.get_color(), alpha=0.12, linewidth=0)
        if method in curves:
            by_step = list(zip(*(smooth(c, SMOOTHING_WINDOW) for c in curves[method]), strict=True))
            left.plot(range(1, len(by_step) + 1), [statistics.fmean(v) for v in by_step], label=labels[method])
    left.set(title="training reward (mean of the step's groups)", xlabel="step")
    middle.set(title="held-out pass@k (mean over seeds, 95% interval)", xlabel="k", xscale="log", ylim=(-0.02, 1.02))
    right.set(title=f"held-out pass@k from k = {zoom_from} (zoomed)", xlabel="k", xscale="log")
    for axis in (middle, right):
        axis.minorticks_off()
    middle.set_xticks(list(KS), [str(k) for k in KS])
    right.set_xticks([k for k in KS if k >= zoom_from], [str(k) for k in KS if k >= zoom_from])
    for axis in (left, middle, right):
        axis.grid(alpha=0.3)
        axis.legend(loc="lower right", fontsize="small")
    figure.suptitle(
        f"two digits summing to a + b: {len(training_prompts())} training prompts, {len(heldout_prompts())} held out"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=11, help="number of seeds (first-seed .. first-seed+seeds-1)")
    parser.add_argument(
        "--first-seed", type=int, default=0, help="the first seed (e.g. 11: seeds that no setting was chosen on)"
    )
    parser.add_argument("--steps", type=int, default=500, help="optimizer steps per RL run")
    parser.add_argument("--prompts-per-step", type=int, default=8, help="prompt groups per optimizer step")
    parser.add_argument("--samples", type=int, default=1024, help="answers sampled per held-out prompt (n >= 256)")
    parser.add_argument(
        "--maxent",
        action="append",
        type=maxent_override,
        default=[],
        metavar="FIELD=VALUE",
        help="MaxEntGRPOConfig override of the MaxEnt run (repeatable), e.g. maxent_mode_probability=policy",
    )
    parser.add_argument(
        "--methods", nargs="+", choices=list(METHODS), default=list(METHODS), help="RL methods to run (default: all)"
    )
    add_output_arguments(parser, "reasoning_boundary", COMMITTED_OUTPUT_DIR)
    args = parser.parse_args(argv)
    if args.samples < max(KS):
        parser.error(f"--samples must be at least {max(KS)}")
    if args.seeds < 1 or args.first_seed < 0:
        parser.error(f"--seeds must be at least 1 and --first-seed at least 0, got {args.seeds} and {args.first_seed}")
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the experiment, print the tables, write the JSON and the PNG; return the JSON's content."""
    args = parse_args(argv)
    hf_logging.set_verbosity_error()
    args.output_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tiny_tokenizer(ALPHABET)
    labels = method_labels(args.maxent)
    heldout = heldout_prompts()
    runs: list[dict[str, Any]] = []
    curves: dict[str, list[list[float]]] = {m: [] for m in args.methods}
    started = time.perf_counter()
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for method in ["base", *args.methods]:
            run_start = time.perf_counter()
            if method == "base":
                model = base = pretrain_base(tokenizer, seed)
            else:
                recorder = StepRecorder(digit_sum_reward)
                model = train(base, tokenizer, method, seed, args, recorder)
                curves[method].append(recorder.rewards)
            figures = evaluate(heldout, sample(model, tokenizer, heldout, args.samples, 1000 + seed))
            probabilities = correct_probabilities(model, tokenizer, heldout)
            figures["exact_pass_at_k"] = exact_pass_at_k(probabilities)
            figures["correct_probability_per_prompt"] = dict(zip(heldout, probabilities, strict=True))
            seconds = time.perf_counter() - run_start
            runs.append({"method": method, "seed": seed, "seconds": round(seconds, 1), **figures})
            cells = " ".join(f"{v:.3f}" for v in figures["pass_at_k"].values())
            unsolved = [prompt for prompt, c in figures["correct_per_prompt"].items() if c == 0]
            print(
                f"seed {seed} {method:<17} {seconds:6.1f}s: held-out pass@{','.join(map(str, KS))} {cells}, "
                f"distinct correct {figures['distinct_correct']:.2f}, unsolved {unsolved or 'none'}, "
                f"exact pass@256 {figures['exact_pass_at_k'][str(max(KS))]:.3f}",
                flush=True,
            )

    summary: dict[str, dict[str, Any]] = {}
    for method in ["base", *args.methods]:
        mine = [r for r in runs if r["method"] == method]
        summary[method] = {
            **over_seeds(mine, "pass_at_k"),
            **over_seeds(mine, "exact_pass_at_k"),
            "distinct_correct": statistics.fmean(r["distinct_correct"] for r in mine),
            "distinct_correct_per_seed": [r["distinct_correct"] for r in mine],
            "distinct_correct_share": statistics.fmean(r["distinct_correct_share"] for r in mine),
        }
        if method in curves:
            final = [statistics.fmean(c[-SMOOTHING_WINDOW:]) for c in curves[method]]
            summary[method]["final_training_reward"] = statistics.fmean(final)
    header = "".join(f"{'pass@' + str(k):>10}" for k in KS)
    width = max(len(labels[m]) for m in summary) + 2
    print(
        f"\nheld-out prompts: {len(heldout)}, n = {args.samples} samples each; distinct = distinct correct per prompt"
    )
    print(f"{'method':<{width}}{header}{'distinct':>10}{'train reward':>14}")
    for method, figures in summary.items():
        cells = "".join(f"{v:>10.3f}" for v in figures["pass_at_k"].values())
        reward = figures.get("final_training_reward")
        reward_cell = "" if reward is None else f"{reward:>14.3f}"
        print(f"{labels[method]:<{width}}{cells}{figures['distinct_correct']:>10.2f}{reward_cell}")
    print("\nexact: the model's own pass@k, 1 - (1 - p)^k, p = each prompt's probability of a correct answer")
    print(f"{'method':<{width}}{header}")
    for method, figures in summary.items():
        print(f"{labels[method]:<{width}}" + "".join(f"{v:>10.3f}" for v in figures["exact_pass_at_k"].values()))
    comparisons = {}
    if "maxent" in args.methods:
        comparisons = {key: paired_differences(runs, "maxent", key) for key in ("pass_at_k", "exact_pass_at_k")}
        print(f"\nMaxEnt minus each method, paired by seed: mean [95% interval] over {args.seeds} seed(s)")
        print(f"{'method':<{width}}{'pass@1':>26}{'pass@256':>26}{'exact pass@256':>26}")
        for other, sampled in comparisons["pass_at_k"].items():
            exact = comparisons["exact_pass_at_k"][other][str(max(KS))]
            cells = [sampled[str(min(KS))], sampled[str(max(KS))], exact]
            print(f"{labels[other]:<{width}}" + "".join(f"{format_difference(c):>26}" for c in cells))

    result = {
        "settings": {
            "seeds": args.seeds,
            "first_seed": args.first_seed,
            "steps": args.steps,
            "prompts_per_step": args.prompts_per_step,
            "num_generations": NUM_GENERATIONS,
            "learning_rate": LEARNING_RATE,
            "samples": args.samples,
            "training_prompts": len(training_prompts()),
            "heldout_prompts": list(heldout),
            "model": {"hidden_size": HIDDEN_SIZE, "num_layers": NUM_LAYERS, "alphabet": ALPHABET},
            "pretrain": {**CORPUS, "steps": PRETRAIN_STEPS, "batch": PRETRAIN_BATCH, "learning_rate": PRETRAIN_LR},
            "methods": {m: METHODS[m][1] for m in args.methods},
            "maxent_overrides": dict(args.maxent),
        },
        "summary": summary,
        "maxent_minus": comparisons,
        "runs": runs,
        "reward_curves_mean_over_seeds": {
            m: [round(statistics.fmean(v), 4) for v in zip(*curves[m], strict=True)] for m in args.methods
        },
        "total_seconds": round(time.perf_counter() - started, 1),
    }
    (args.output_dir / "reasoning_boundary.json").write_text(json.dumps(result, indent=1) + "\n")
    plot(summary, curves, labels, args.output_dir / "reasoning_boundary.png")
    print(f"total {result['total_seconds']:.0f}s; wrote {args.output_dir / 'reasoning_boundary.json'} and the PNG")
    return result


if __name__ == "__main__":
    torch.set_num_threads(1)  # the model is tiny: more threads only add contention on a small machine
    main()
