"""Run under `accelerate launch` with two gloo processes and a DeepSpeed ZeRO config (CPU): every probe of this folder
for one ZeRO stage, one after another in the same two processes (a launch costs tens of seconds).

Usage: probe_zero.py OUTPUT_DIR DEEPSPEED_CONFIG [MODEL_DIR BASE_URL]. The sections, in this order, each writing
OUTPUT_DIR/<section>/rank<r>.json:

- ``update`` (`probe_update`): the two-step runs with dropped groups;
- ``symmetry`` (`probe_symmetry`), under ZeRO-3 only: faults on one process with the built-in backend;
- ``server_weights`` (`probe_server_weights`), given a model and a server: the disk weight transfer. Last, so the
  server, started in the background when the launch began, has the other sections' time to come up.

Every training run starts from a fresh trainer and model with the same ZeRO config, so what a process keeps from one
run to the next (accelerate's `AcceleratorState`, the DeepSpeed plugin, the HF DeepSpeed config that makes ZeRO-3
partition every model built or loaded after it) is what each run after the first in a probe of its own saw as well.
The one thing that needs a process without it, the server's initial log-probs from the model loaded whole, is
computed first, before any DeepSpeed config exists.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from maxent_grpo.cli.commands.train import end_training
from tests.deepspeed import probe_server_weights, probe_symmetry, probe_update


def section(name: str, run: Callable[[], Any]) -> Any:
    """``run()``, its time printed (the launch's log says how far a failed launch came and what each section costs)."""
    start = time.monotonic()
    result = run()
    print(f"probe_zero: section {name} done in {time.monotonic() - start:.0f} s", flush=True)
    return result


def main(output_dir: Path, deepspeed_config: Path, served: list[str]) -> None:
    stage = json.loads(deepspeed_config.read_text())["zero_optimization"]["stage"]
    initial = probe_server_weights.initial_logprobs(served[0]) if served else None
    accelerator = section("update", partial(probe_update.run, output_dir / "update", deepspeed_config))
    if stage == 3:
        accelerator = section("symmetry", partial(probe_symmetry.run, output_dir / "symmetry", deepspeed_config))
    if served:
        model_dir, base_url = served
        run = partial(
            probe_server_weights.run,
            output_dir / "server_weights",
            str(deepspeed_config),
            model_dir,
            base_url,
            initial,
        )
        accelerator = section("server_weights", run)
    end_training(accelerator)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:])
