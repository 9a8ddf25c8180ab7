"""The server pool's scaling curve: its throughput against the sum of its servers' own, with and without a slow one.

Stand-in servers (``tests/support/stand_in_vllm/server.py``) with a fixed per-token latency: each one serves one
request at a time and sleeps ``--token-seconds`` per token asked for (``n`` x ``max_tokens``), so its throughput is
fixed whatever else the machine runs, and a pool of them measures the pool (its split, its threads, its HTTP), not
the model. A slow server sleeps ``--slowdown`` times as long.

For each set-up (1, 2, 4, 8 servers; 4 servers of which one is slow) the script measures:

- each server's own rate: completions per second of one `VLLMServerBackend` call of the same work per server, alone;
- the pool's rate: completions per second over ``--calls`` calls of a `VLLMServerPool` (with one server, the
  `VLLMServerBackend` the trainer builds for one), after ``--warmup`` calls in
  which it measured its servers (the first calls split the work evenly, and a slow server may lose a hedge);

and ``ratio`` = the pool's rate / the sum of its servers' own rates (1: the pool loses nothing). Each call asks for 5
prompt groups per fast server's worth of work, ``--completions`` completions each: with one server 5 times slower
among 4, 16 groups, which split in proportion (5, 5, 5 and 1). A group is not split across servers, so a call whose
groups cannot be split in proportion loses the remainder (13 groups instead of 16 would give 0.82 here).

Run from the repository root::

    python benchmarks/server_pool_scaling.py --output-dir benchmarks/results/server_pool_scaling

It prints one line per set-up and writes ``server_pool_scaling.json`` (``rows``: ``servers``, ``slow_servers``,
``ratio``, the rates) and ``server_pool_scaling.png``. What it does not show: real engines (which batch requests, so
a server's rate depends on its load), several machines, or a network slower than loopback.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the stand-in servers live with the tests

from transformers import AutoTokenizer  # noqa: E402

from maxent_grpo.tiny_model import save_tiny_model  # noqa: E402
from maxent_grpo.training.generation.backends.vllm_server import VLLMServerBackend  # noqa: E402
from maxent_grpo.training.generation.backends.vllm_server_pool import VLLMServerPool  # noqa: E402
from maxent_grpo.training.generation.contract.sampling import SamplingSettings  # noqa: E402
from tests.support.stand_in_vllm.process import run_test_servers  # noqa: E402

GROUPS_PER_SERVER = 5
MAX_TOKENS = 8


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", type=Path, required=True, help="where the JSON and the plot are written")
    parser.add_argument("--servers", type=int, nargs="+", default=[1, 2, 4, 8], help="pool sizes (default: 1 2 4 8)")
    parser.add_argument("--slow-pool", type=int, default=4, help="size of the pool with one slow server (0: none)")
    parser.add_argument("--slowdown", type=float, default=5.0, help="how many times slower the slow server is")
    parser.add_argument("--token-seconds", type=float, default=0.02, help="a fast server's seconds per token")
    parser.add_argument("--completions", type=int, default=4, help="completions per prompt group")
    parser.add_argument("--warmup", type=int, default=6, help="calls before the measured ones")
    parser.add_argument("--calls", type=int, default=5, help="measured calls per set-up")
    return parser.parse_args()


def own_rate(url: str, tokenizer, sampling: SamplingSettings, groups: int, completions: int) -> float:
    """Completions per second of one server alone, over two calls of ``groups`` groups (after one warm-up)."""
    backend = VLLMServerBackend(url, tokenizer=tokenizer, sampling=sampling, request_timeout=600.0)
    prompts = [f"p{i}" for i in range(groups)]
    backend.generate(prompts, [completions] * groups)
    start = time.monotonic()
    got = sum(len(group) for _ in range(2) for group in backend.generate(prompts, [completions] * groups))
    backend.close()
    return got / (time.monotonic() - start)


def pool_rate(urls: list[str], tokenizer, sampling: SamplingSettings, args: argparse.Namespace, groups: int) -> float:
    # One URL: the backend the trainer builds for one server (a pool needs two).
    kind = VLLMServerPool if len(urls) > 1 else lambda urls, **options: VLLMServerBackend(urls[0], **options)
    pool = kind(urls, tokenizer=tokenizer, sampling=sampling, request_timeout=600.0)
    prompts = [f"p{i}" for i in range(groups)]
    counts = [args.completions] * groups
    for _ in range(args.warmup):
        pool.generate(prompts, counts)
    start = time.monotonic()
    got = sum(len(group) for _ in range(args.calls) for group in pool.generate(prompts, counts))
    seconds = time.monotonic() - start
    pool.close()
    return got / seconds


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(5.5, 3.5))
    even = [row for row in rows if row["slow_servers"] == 0]
    axis.plot([row["servers"] for row in even], [row["ratio"] for row in even], "o-", label="equal servers")
    for row in rows:
        if row["slow_servers"]:
            axis.plot(row["servers"], row["ratio"], "s", color="C3", label=f"{row['slow_servers']} of them slow")
    axis.axhline(0.9, color="grey", linestyle=":", label="target 0.9")
    axis.set_xscale("log", base=2)
    axis.set_xticks([row["servers"] for row in even], [str(row["servers"]) for row in even])
    axis.set_ylim(0, 1.1)
    axis.set_xlabel("servers in the pool")
    axis.set_ylabel("pool rate / sum of own rates")
    axis.legend(loc="lower left")
    figure.tight_layout()
    figure.savefig(path, dpi=80)


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.ERROR)
    fast_flags = ("--token-seconds", str(args.token_seconds))
    slow_flags = ("--token-seconds", str(args.token_seconds * args.slowdown))
    flag_sets = {f"fast{k}": fast_flags for k in range(max([*args.servers, args.slow_pool - 1]))}
    if args.slow_pool:
        flag_sets["slow"] = slow_flags
    sampling = SamplingSettings(max_tokens=MAX_TOKENS)
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = save_tiny_model(Path(scratch) / "model")
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        with run_test_servers(flag_sets, model_dir=model_dir) as urls:

            def alone(name: str) -> float:
                return own_rate(urls[name], tokenizer, sampling, GROUPS_PER_SERVER, args.completions)

            with ThreadPoolExecutor(max_workers=len(urls)) as executor:
                rates = dict(zip(urls, executor.map(alone, urls), strict=True))
            setups = [[f"fast{k}" for k in range(n)] for n in args.servers]
            if args.slow_pool:
                setups.append([f"fast{k}" for k in range(args.slow_pool - 1)] + ["slow"])
            rows = []
            for names in setups:
                ideal = sum(rates[name] for name in names)
                fast_equivalents = sum(rates[name] for name in names) / rates["fast0"]
                groups = max(round(GROUPS_PER_SERVER * fast_equivalents), 1)
                measured = pool_rate([urls[name] for name in names], tokenizer, sampling, args, groups)
                row = {
                    "servers": len(names),
                    "slow_servers": sum(name == "slow" for name in names),
                    "ratio": measured / ideal,
                    "pool_completions_per_second": measured,
                    "ideal_completions_per_second": ideal,
                    "groups_per_call": groups,
                }
                rows.append(row)
                print(
                    f"{row['servers']} server(s), {row['slow_servers']} slow: pool {measured:.1f} completions/s, "
                    f"sum of own rates {ideal:.1f}, ratio {row['ratio']:.3f}",
                    flush=True,
                )
    args.output_dir.mkdir(parents=True, exist_ok=True)
    result = {
        "rows": rows,
        "own_rates": {name: rate for name, rate in rates.items()},
        "settings": {key: value for key, value in vars(args).items() if key != "output_dir"}
        | {"max_tokens": MAX_TOKENS, "groups_per_server": GROUPS_PER_SERVER},
    }
    (args.output_dir / "server_pool_scaling.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(rows, args.output_dir / "server_pool_scaling.png")
    print(f"wrote {args.output_dir / 'server_pool_scaling.json'} and the plot beside it")


if __name__ == "__main__":
    main()
