"""One benchmark run in a process of its own: ``python -m maxent_grpo.bench.worker SPEC.json RESULT.json``.

A fresh process per run carries no state from the previous run (allocator caches, kernels, trackio's open run), and
trackio reads its storage directory (``TRACKIO_DIR``) once at import, from this process's environment.
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import trackio
from transformers import TrainerCallback

from maxent_grpo.bench.arms import ARMS
from maxent_grpo.bench.recipes import build_dataset, build_model
from maxent_grpo.bench.spec import RunSpec
from maxent_grpo.config import MaxEntGRPOConfig
from maxent_grpo.rewards import REWARDS
from maxent_grpo.trainer import MaxEntGRPOTrainer
from maxent_grpo.training.generation.backends.colocate_engine import ReloadWeightSync, engine_dtype


class RecordRunMetadata(TrainerCallback):
    """Adds the benchmark's metadata to the trackio run's config.

    Runs after transformers' `TrackioCallback` (reporting callbacks come first), which opens the run in
    `on_train_begin`; the config reaches trackio's storage with the run's first logged step.
    """

    def __init__(self, metadata: dict[str, Any]) -> None:
        self.metadata = metadata

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        if trackio.context_vars.current_run.get() is None:
            raise RuntimeError("No trackio run is open at train begin: the run must use report_to='trackio'.")
        trackio.config.update(self.metadata)


def train(spec: RunSpec) -> dict[str, Any]:
    """Train one run, logging to a local trackio project; return its log history and training seconds."""
    recipe = spec.recipe
    if recipe.torch_num_threads is not None:
        torch.set_num_threads(recipe.torch_num_threads)
    arm = ARMS[spec.arm]
    model, tokenizer = build_model(recipe, spec.seed)
    with tempfile.TemporaryDirectory(prefix="maxent-grpo-ab-") as output_dir:
        args = arm.config_class(
            output_dir=output_dir,
            seed=spec.seed,
            run_name=spec.run_name,
            project=spec.project,
            report_to="trackio",
            trackio_space_id=None,
            trackio_static_space_id=False,
            **_same_precision_for_every_arm(recipe.training),
            **arm.config_fields,
        )
        stock_on_cpu_engine = (
            args.use_cpu
            and args.use_vllm
            and args.vllm_mode == "colocate"
            and arm.trainer_class is not MaxEntGRPOTrainer
        )
        # On the CPU the stock arm's colocated engine is built in the dtype the training forward computes in, as
        # MaxEntGRPOTrainer builds its own (``vllm_dtype="training"``; vLLM's own choice, which stock TRL leaves, turns
        # a float32 checkpoint into bfloat16 and the arms would sample in different precisions), and takes its weights
        # through this package's in-place reload: TRL 1.16's ``load_weights`` fails on vLLM's CPU engine for a model
        # whose layers the engine repacks (SmolLM2: "'Parameter' object has no attribute 'weight_loader'"). Its
        # generation, scoring and loss stay TRL's.
        with engine_dtype(lambda: _forward_dtype(args)) if stock_on_cpu_engine else contextlib.nullcontext():
            trainer = arm.trainer_class(
                model=model,
                reward_funcs=REWARDS[recipe.reward],
                args=args,
                train_dataset=build_dataset(recipe),
                processing_class=tokenizer,
                callbacks=[RecordRunMetadata(spec.metadata)],
            )
        if stock_on_cpu_engine:
            trainer.vllm_generation.sync_weights = ReloadWeightSync(trainer.vllm_generation)
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
    return {"log_history": trainer.state.log_history, "train_seconds": seconds}


def _same_precision_for_every_arm(training: dict[str, Any]) -> dict[str, Any]:
    """``training`` with ``bf16`` set where the arms' configs would default it differently: with ``use_cpu`` and
    ``use_vllm`` and no precision given, `MaxEntGRPOConfig` turns bf16 off and TRL's `GRPOConfig` on; every arm then
    runs in the one MaxEntGRPOConfig chooses, so that the comparison is of the trainers, not of precisions."""
    unset = "bf16" not in training and not training.get("fp16")
    if unset and training.get("use_cpu") and training.get("use_vllm"):
        return {**training, "bf16": MaxEntGRPOConfig(output_dir=".", report_to="none", **training).bf16}
    return training


def _forward_dtype(args: Any) -> str:
    """The dtype the training forward computes in: the mixed precision, else the parameters' (float32 here)."""
    return "bfloat16" if args.bf16 else "float16" if args.fp16 else "float32"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m maxent_grpo.bench.worker SPEC.json RESULT.json", file=sys.stderr)
        return 2
    spec_path, result_path = (Path(arg) for arg in argv)
    result = train(RunSpec.from_json(spec_path.read_text()))
    result_path.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
