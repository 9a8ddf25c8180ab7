"""Minority routes: held-out prompts that only a rare route of the base model solves; MaxEnt against TRL's options.

The claim tested: where which answer mode a sample takes decides whether it is correct on held-out prompts, MaxEnt's
answer-level objective (listwise weights over distinct final answers, the mode key ``last_line``) keeps the base
model's rare modes alive through training and so solves more held-out prompts at large k than TRL's token-level
entropy options, which spread probability over every token of an exact derivation rather than over the modes. The
pre-registered predictions and how they could fail are on docs/benchmarks/minority-routes.md, written before the run.

Task (`maxent_grpo_experiments.route_derivations`): a prompt "abcd:" asks for a running total in which exactly one of
b, c, d is subtracted, each total on two digits, then the total on a last line: three routes, R1 = a+b+c-d, R2 =
a+b-c+d, R3 = a-b+c+d ("5310:" -> "5+3=08-1=07+0=07\\n07" on R2; twenty tokens with EOS). A route is valid only if
every running total is at least 0; reward 1.0 only for the exact chain of a valid route and its total. The 3060 prompts
on which every route is valid are trained on; the 72 held-out prompts are 24 per route on which only that route is
valid; 24 training prompts form the probe set.

Base model: per seed, the tiny offline Qwen2 model (`maxent_grpo.tiny_model`, character tokenizer over the digits,
"+", "-", "=", ":" and the newline) pre-trained in-process by a short supervised run on a corpus of the training
prompts: 80% exact chains whose route is, on every prompt alike, the seed's majority route with share 0.85, its
minority route 0.14 and its rarest 0.01 (the roles of R1 to R3 rotating with the seed), 20% wrong (a slip in a running
total, or a wrong total after the right chain). So a held-out prompt needs the majority, the minority or the rarest
route: its role.

From that base, with the same budget (``--steps`` optimizer steps of ``--prompts-per-step`` prompts x 8 completions of
at most 20 tokens, learning rate 5e-4 with TRL's linear decay, beta 0, temperature 1): the TRL arms of
`maxent_grpo_experiments.trl_baselines` (stock GRPO; a fixed ``entropy_coef``, the best of ``--entropy-grid`` by
`maxent_grpo_experiments.entropy_grid`: the most distinct exact routes per probe prompt among the coefficients whose
training reward is within 0.01 of GRPO's, on the same seeds; TRL's adaptive entropy bonus;
``top_entropy_quantile=0.2``) and MaxEnt listwise at the config defaults (only ``maxent_objective="listwise"`` and
``maxent_mode_key="last_line"``, plus any ``--maxent FIELD=VALUE`` override), interleaved per seed in one process;
MaxEnt's difference to each other method is taken seed by seed with its 95% t interval
(`maxent_grpo_experiments.over_seeds`).

Figures of a run: on the held-out prompts, exact pass@k from the logits (primary: p = P(chain, newline, total, EOS) of
the prompt's valid route, pass@k = 1 - (1 - p)^k) and the unbiased pass@k from ``--samples`` samples, overall and per
role of the required route; per held-out prompt the route's probability (the product of its three operator tokens'
probabilities along its exact chain) and the route-conditional exactness (the product of the chain's other tokens'
probabilities, EOS included): their product is p; on the probe set, the distinct exact routes per prompt among the
samples and each role's share of the samples; the final training reward. The calibration gates of the page
(`calibration`) are checked whenever the base model and GRPO ran.

    python benchmarks/minority_routes.py [--seeds 11] [--first-seed 0] [--steps 96] [--prompts-per-step 8]
                                         [--samples 256] [--methods ...] [--entropy-grid C ...]
                                         [--maxent FIELD=VALUE ...] [--output-dir DIR | --update-results]

The calibration is ``--first-seed 100 --seeds 4 --methods grpo``; the pre-registered run ``--seeds 8``.

It writes ``minority_routes.json`` (the schema of ``reasoning_boundary.json``: settings; per method ``pass_at_k`` /
``exact_pass_at_k`` and the per-role ``exact_pass_at_k_<role>``, k as a string -> mean over seeds, with the per-seed
values and the 95% interval, ``distinct_correct``, the route figures and ``final_training_reward`` likewise;
``maxent_minus``: MaxEnt minus each other method paired by seed, with its 95% interval; ``entropy_grid``; every run;
mean reward curves; ``calibration``: the gates) and ``minority_routes.png`` (training reward; held-out exact pass@k
against k with 95% bands, overall and per role) into the output directory (``outputs/benchmarks/minority_routes`` by
default; ``--update-results`` replaces the committed ``benchmarks/results/minority_routes``) and prints the tables.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from maxent_grpo.rewards import completion_text
from maxent_grpo_experiments import held_out
from maxent_grpo_experiments.held_out_experiment import HeldOutTask, run_benchmark
from maxent_grpo_experiments.held_out_methods import method_labels
from maxent_grpo_experiments.held_out_options import HeldOutCommand
from maxent_grpo_experiments.held_out_report import figure_cell
from maxent_grpo_experiments.held_out_setup import KS, HeldOutSetup
from maxent_grpo_experiments.pass_at_k import mean_pass_at_k
from maxent_grpo_experiments.route_derivations import (
    OPERATOR_POSITIONS,
    ROLES,
    completion,
    corpus_prompts,
    grade,
    heldout_prompts,
    heldout_route,
    probe_prompts,
    route_roles,
    sample_corpus,
    training_prompts,
    valid_routes,
)

NUM_GENERATIONS = 8
LEARNING_RATE = 5e-4


def correct_completions(prompt: str) -> tuple[str, ...]:
    """The completions `grade` accepts: one per valid route of ``prompt``."""
    return tuple(completion(prompt, route) for route in valid_routes(prompt))


#: The tiny model over the digits, "+", "-", "=", ":" and the newline, completions of twenty tokens that end with EOS
#: (the chain's sixteen characters, the newline, the total's two), and the base model's supervised run on the corpus
#: of the training prompts.
SETUP = HeldOutSetup(
    alphabet="0123456789+-=:\n",
    hidden_size=128,
    num_layers=2,
    completion_length=20,
    corpus_prompts=corpus_prompts(),
    sample_corpus=sample_corpus,
    corpus={"per_prompt": 8, "wrong_fraction": 0.2},
    correct_completions=correct_completions,
    stops=True,
    pretrain_steps=1000,
)

COMMAND = HeldOutCommand(
    script=__file__,
    docstring=__doc__,
    steps=96,
    samples=256,
    samples_help=f"completions sampled per held-out and per probe prompt (n >= {max(KS)})",
    maxent_example="maxent_tau=0.5",
)

#: The per-role figures of a run: held-out exact and sampled pass@k, route probability and route-conditional
#: exactness on the held-out prompts that need the role's route, and the role's share of the probe samples.
ROLE_FIGURES = tuple(
    f"{figure}_{role}"
    for figure in ("exact_pass_at_k", "pass_at_k", "route_probability", "route_exactness", "route_share")
    for role in ROLES
)

#: The run figures besides pass@k that the summary and the paired differences give.
FIGURES = ("distinct_correct", "minority_share", "route_exactness", *ROLE_FIGURES, "final_training_reward")

#: The calibration gates (docs/benchmarks/minority-routes.md): the base model's route-conditional exactness on the
#: held-out prompts of every role at least this; its held-out exact pass@256 in this range; GRPO's share of the
#: rarest route on the probe set at most this fraction of the base model's.
MIN_BASE_EXACTNESS = 0.2
BASE_PASS_AT_256 = (0.6, 0.9)
RAREST_SHARE_RATIO = 0.5


def route_reward(completions: list, prompts: list, **kwargs: Any) -> list[float]:
    """1.0 when the completion is exactly the chain of a valid route of its prompt and that route's total; else 0.0."""
    pairs = zip(prompts, completions, strict=True)
    return [float(grade(completion_text(p), completion_text(c)).correct) for p, c in pairs]


def route_factors(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, pairs: Sequence[tuple[str, str]]
) -> list[tuple[float, float]]:
    """Per (prompt, route), the route's probability and its route-conditional exactness, read off the logits along
    the route's exact completion (EOS included).

    The route's probability is the product of the probabilities of its three operator tokens (at
    `maxent_grpo_experiments.route_derivations.OPERATOR_POSITIONS`, each given the exact chain before it); the
    exactness is the product of every other token's; their product is the probability of sampling the route's exact
    completion.
    """
    logps = held_out.completion_log_probabilities(
        model, tokenizer, [(prompt, completion(prompt, route)) for prompt, route in pairs], append_eos=True
    )
    operators = torch.zeros(logps.shape[1], dtype=torch.bool)
    operators[list(OPERATOR_POSITIONS)] = True
    route = logps[:, operators].sum(-1).exp().tolist()
    exactness = logps[:, ~operators].sum(-1).exp().tolist()
    return list(zip(route, exactness, strict=True))


def evaluate(prompts: Sequence[str], completions: Sequence[Sequence[str]]) -> dict[str, Any]:
    """Mean sampled pass@k over ``prompts`` for every k of `KS`, and per prompt the number of correct completions
    and of completions that take each route."""
    counts, routes = [], {}
    for prompt, group in zip(prompts, completions, strict=True):
        grades = [grade(prompt, text) for text in group]
        counts.append((len(group), sum(g.correct for g in grades)))
        routes[prompt] = {route: sum(g.route == route for g in grades) for route in ("R1", "R2", "R3")}
    return {
        "pass_at_k": {str(k): mean_pass_at_k(counts, k) for k in KS},
        "correct_per_prompt": {prompt: c for prompt, (_, c) in zip(prompts, counts, strict=True)},
        "sampled_routes_per_prompt": routes,
    }


def probe(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, seed: int, samples: int) -> dict[str, Any]:
    """The probe set's figures: distinct exact routes per probe prompt among ``samples`` samples, per role the share of
    the samples that take its route (means over the probe prompts), and the minority share (minority + rarest)."""
    roles = route_roles(seed)
    prompts = probe_prompts()
    distinct, shares = [], {role: [] for role in ROLES}
    for prompt, group in zip(prompts, SETUP.sample(model, tokenizer, prompts, samples, 2000 + seed), strict=True):
        grades = [grade(prompt, text) for text in group]
        distinct.append(len({g.route for g in grades if g.correct}))
        for role in ROLES:
            shares[role].append(sum(g.route == roles[role] for g in grades) / len(grades))
    figures = {f"route_share_{role}": statistics.fmean(shares[role]) for role in ROLES}
    minority = figures["route_share_minority"] + figures["route_share_rarest"]
    return {"distinct_correct": statistics.fmean(distinct), **figures, "minority_share": minority}


def more_figures(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    figures: Mapping[str, Any],
    seed: int,
    samples: int,
) -> dict[str, Any]:
    """The figures that need the seed's roles or the model beyond the held-out samples: per held-out prompt the
    route's probability and exactness (`route_factors`); per role the held-out exact and sampled pass@k, the mean
    route probability and exactness; the mean exactness over every held-out prompt; the probe set's figures."""
    roles = route_roles(seed)
    prompts = list(figures["correct_per_prompt"])
    factors = route_factors(model, tokenizer, [(p, heldout_route(p)) for p in prompts])
    route_probability = {p: f[0] for p, f in zip(prompts, factors, strict=True)}
    exactness = {p: f[1] for p, f in zip(prompts, factors, strict=True)}
    result: dict[str, Any] = {
        "route_roles": roles,
        "route_exactness": statistics.fmean(exactness.values()),
        "route_probability_per_prompt": route_probability,
        "route_exactness_per_prompt": exactness,
    }
    for role in ROLES:
        mine = [p for p in prompts if heldout_route(p) == roles[role]]
        result[f"exact_pass_at_k_{role}"] = SETUP.exact_pass_at_k(
            [figures["correct_probability_per_prompt"][p] for p in mine]
        )
        counts = [(samples, figures["correct_per_prompt"][p]) for p in mine]
        result[f"pass_at_k_{role}"] = {str(k): mean_pass_at_k(counts, k) for k in KS}
        result[f"route_probability_{role}"] = statistics.fmean(route_probability[p] for p in mine)
        result[f"route_exactness_{role}"] = statistics.fmean(exactness[p] for p in mine)
    return result | probe(model, tokenizer, seed, samples)


def calibration(summary: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """The calibration gates on the base model's and GRPO's figures over seeds (means), with the figures they read;
    None unless both ran.

    The gates: the base model's route-conditional exactness on the held-out prompts of every role at least
    `MIN_BASE_EXACTNESS`; its held-out exact pass@256 within `BASE_PASS_AT_256`; GRPO's share of the rarest route on
    the probe set at most `RAREST_SHARE_RATIO` times the base model's.
    """
    if "base" not in summary or "grpo" not in summary:
        return None
    base, grpo = summary["base"], summary["grpo"]
    exactness = {role: base[f"route_exactness_{role}"] for role in ROLES}
    pass_at_256 = base["exact_pass_at_k"]["256"]
    shares = {"base": base["route_share_rarest"], "grpo": grpo["route_share_rarest"]}
    gates = {
        "base_exactness_every_role": min(exactness.values()) >= MIN_BASE_EXACTNESS,
        "base_exact_pass_at_256_in_range": BASE_PASS_AT_256[0] <= pass_at_256 <= BASE_PASS_AT_256[1],
        "grpo_halves_rarest_share": shares["grpo"] <= RAREST_SHARE_RATIO * shares["base"],
    }
    return {
        "passed": all(gates.values()),
        "gates": gates,
        "base_route_exactness": exactness,
        "base_exact_pass_at_256": pass_at_256,
        "rarest_route_share": shares,
    }


#: The TRL arms the predictions compare MaxEnt with (docs/benchmarks/minority-routes.md).
TRL_ARMS = ("grpo", "grpo_entropy_fixed", "grpo_entropy", "grpo_top_entropy")
#: P2: MaxEnt's exact pass@1 at most this much below the best trained arm's; F1: a TRL arm's route-conditional
#: exactness at most this much below MaxEnt's.
PASS_AT_1_MARGIN = 0.02
EXACTNESS_MARGIN = 0.01


def _ahead(difference: Mapping[str, Any]) -> bool:
    """MaxEnt minus an arm lies above 0 beyond noise: its paired 95% interval is above 0."""
    return difference["ci95"] is not None and difference["ci95"][0] > 0


def predictions(summary: Mapping[str, Mapping[str, Any]], minus: Mapping[str, Any]) -> dict[str, Any] | None:
    """The pre-registered predictions P1-P4 and falsification criteria F1-F3 (docs/benchmarks/minority-routes.md),
    read off the summary over seeds and MaxEnt's paired differences (``maxent_minus``); None unless MaxEnt and every
    TRL arm ran. "Ahead" is a paired 95% interval of MaxEnt minus the arm above 0, "level" one that contains 0.

    - P1: MaxEnt ahead of every TRL arm at held-out exact pass@16 and at exact pass@256.
    - P2: MaxEnt's exact pass@1 at most `PASS_AT_1_MARGIN` below the best trained arm's (means).
    - P3: MaxEnt's route-conditional exactness minus the fixed and the adaptive bonus's, paired mean, at least 0.
    - P4: on the prompts that need the majority route, MaxEnt not ahead of GRPO at exact pass@256.
    - F1: a TRL arm not behind MaxEnt (MaxEnt not ahead) at both exact pass@16 and pass@256, with a route-conditional
      exactness at most `EXACTNESS_MARGIN` below MaxEnt's (within it, or above).
    - F2: an arm MaxEnt is ahead of at exact pass@256 with a minority share on the probe set at least MaxEnt's (paired
      mean difference of the minority share at most 0).
    - F3: MaxEnt's gain over GRPO at exact pass@256 on the majority-route prompts at least the mean of its gains on the
      minority-route and the rarest-route prompts.

    Returns:
        ``predictions`` and ``falsified`` (name -> whether it holds), ``held`` (all predictions hold, no criterion
        holds) and ``figures`` (what each read).
    """
    if "maxent" not in summary or any(arm not in summary for arm in TRL_ARMS):
        return None
    exact = minus["exact_pass_at_k"]
    ahead = {arm: {k: _ahead(exact[arm][k]) for k in ("16", "256")} for arm in TRL_ARMS}
    exactness = {arm: minus["route_exactness"][arm]["mean"] for arm in TRL_ARMS}
    pass_at_1 = {m: summary[m]["exact_pass_at_k"]["1"] for m in summary if m != "base"}
    gains = {role: minus[f"exact_pass_at_k_{role}"]["grpo"]["256"]["mean"] for role in ROLES}
    share = {arm: minus["minority_share"][arm]["mean"] for arm in TRL_ARMS}
    majority = minus["exact_pass_at_k_majority"]["grpo"]["256"]
    held = {
        "P1": all(all(by_k.values()) for by_k in ahead.values()),
        "P2": pass_at_1["maxent"] >= max(pass_at_1.values()) - PASS_AT_1_MARGIN,
        "P3": exactness["grpo_entropy_fixed"] >= 0 and exactness["grpo_entropy"] >= 0,
        "P4": not _ahead(majority),
    }
    falsified = {
        "F1": any(not any(ahead[arm].values()) and exactness[arm] <= EXACTNESS_MARGIN for arm in TRL_ARMS),
        "F2": any(ahead[arm]["256"] and share[arm] <= 0 for arm in TRL_ARMS),
        "F3": gains["majority"] >= (gains["minority"] + gains["rarest"]) / 2,
    }
    return {
        "predictions": held,
        "falsified": falsified,
        "held": all(held.values()) and not any(falsified.values()),
        "figures": {
            "maxent_ahead_at_exact_pass_at_k": ahead,
            "maxent_minus_route_exactness": exactness,
            "exact_pass_at_1": pass_at_1,
            "maxent_minus_grpo_exact_pass_at_256_by_role": gains,
            "maxent_minus_minority_share": share,
        },
    }


def plot_roles(summary: Mapping[str, Mapping[str, Any]], labels: Mapping[str, str], path: Path) -> None:
    """Write the PNG of held-out exact pass@k against k, overall and per role of the required route (mean over seeds,
    95% band), to ``path``."""
    keys = ("exact_pass_at_k", *(f"exact_pass_at_k_{role}" for role in ROLES))
    titles = ("all held-out prompts", *(f"prompts that need the {role} route" for role in ROLES))
    figure, axes = plt.subplots(1, len(keys), figsize=(6 * len(keys), 4.6))
    for axis, key, title in zip(axes, keys, titles, strict=True):
        for method, figures in summary.items():
            values = [figures[key][str(k)] for k in KS]
            (line,) = axis.plot(KS, values, "k--" if method == "base" else "-", marker="o", label=labels[method])
            bands = [figures[f"{key}_ci95"][str(k)] for k in KS]
            if all(band is not None for band in bands):
                low, high = [max(b[0], 0.0) for b in bands], [min(b[1], 1.0) for b in bands]
                axis.fill_between(KS, low, high, color=line.get_color(), alpha=0.12, linewidth=0)
        axis.set(title=f"exact pass@k, {title}", xlabel="k", xscale="log", ylim=(-0.02, 1.02))
        axis.minorticks_off()
        axis.set_xticks(list(KS), [str(k) for k in KS])
        axis.grid(alpha=0.3)
    axes[0].legend(loc="lower right", fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)


def _cell(key: str, digits: int = 3) -> tuple[str, int, Any]:
    return (key.replace("route_", "").replace("_", " "), 18, figure_cell(key, digits=digits))


def task() -> HeldOutTask:
    """The task, with the settings of the module's constants."""
    return HeldOutTask(
        setup=SETUP,
        reward=route_reward,
        evaluate=evaluate,
        training_prompts=training_prompts(),
        num_generations=NUM_GENERATIONS,
        learning_rate=LEARNING_RATE,
        figures=FIGURES,
        summary_keys=("pass_at_k", "exact_pass_at_k", *FIGURES),
        grid_figures=("pass_at_k", "exact_pass_at_k", "route_share_rarest", "route_share_minority"),
        progress=(
            ("distinct routes", "distinct_correct", ".2f"),
            ("shares", "route_share_majority", ".3f"),
            ("/", "route_share_minority", ".3f"),
            ("/", "route_share_rarest", ".3f"),
            ("exactness", "route_exactness", ".3f"),
        ),
        intro="held-out prompts: {prompts} (24 per route), n = {samples} samples each; distinct = distinct exact "
        "routes per probe prompt; shares = the probe samples' routes by role; exactness = route-conditional",
        columns=(
            ("distinct", 10, figure_cell("distinct_correct", digits=2)),
            *(_cell(f"route_share_{role}") for role in ROLES),
            ("exactness", 11, figure_cell("route_exactness")),
        ),
        minus=(
            ("exact pass@1", "exact_pass_at_k", 1),
            ("exact pass@16", "exact_pass_at_k", 16),
            ("exact pass@256", "exact_pass_at_k", 256),
            *((f"exact@256 {role}", f"exact_pass_at_k_{role}", 256) for role in ROLES),
            ("exactness", "route_exactness", None),
            ("minority share", "minority_share", None),
            ("rarest share", "route_share_rarest", None),
        ),
        title="three routes, held-out prompts that allow one: {training} training prompts, {heldout} held out",
        name_width=23,
        recorded={"completion_length": SETUP.completion_length, "probe_prompts": list(probe_prompts())},
        more_figures=more_figures,
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the experiment, print the tables, the calibration gates and the predictions' verdicts, write the JSON and
    the PNGs; return the JSON's content."""
    args = COMMAND.parse_args(argv, KS)
    result = run_benchmark(COMMAND.name, task(), args, heldout_prompts())
    result["calibration"] = calibration(result["summary"])
    if result["calibration"] is not None:
        print(f"\ncalibration gates: {json.dumps(result['calibration'])}")
    result["predictions"] = predictions(result["summary"], result["maxent_minus"])
    if result["predictions"] is not None:
        print(f"\npre-registered predictions: {json.dumps(result['predictions'])}")
    (args.output_dir / f"{COMMAND.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    grid = result["entropy_grid"]
    labels = method_labels(args.maxent, None if grid is None else grid["chosen"], len(args.entropy_grid))
    plot_roles(result["summary"], labels, args.output_dir / f"{COMMAND.name}_roles.png")
    return result


if __name__ == "__main__":
    main()
