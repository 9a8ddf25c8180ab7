"""Run under `accelerate launch --multi_gpu --num_processes 2` (CPU, gloo): the scenarios of `test_two_processes.py`,
one after another in the same two processes, so that the processes start (interpreters, imports, the gloo group)
once for all of them.

Usage: probe_scenarios.py OUTPUT_DIR MODEL_DIR SCENARIO [SCENARIO ...], each a name of `scenarios`. Each scenario
builds everything from scratch as a launch of its own would: its model, config, trainer, backend and output folder
(OUTPUT_DIR/<scenario>). Its config resets accelerate's state singletons (``TrainingArguments`` does, when it sets up
its devices) and its trainer reseeds the random generators; what the scenarios share is the default process group.
FSDP2 needs no accelerate plugin or launch flag (the model is sharded when it is loaded), so it runs here too.

Each process writes OUTPUT_DIR/<scenario>/rank<r>.json: ``{"status": "running"}`` when the scenario starts, then
``{"status": "ok", "record": ...}`` or ``{"status": "error", "traceback": ...}``. A scenario that raises ends the
launch at once (exit 1), since the other process may be waiting in a collective this one will never join; the caller
(`test_two_processes.run_scenarios`) launches again the scenarios that did not run. A scenario running past
`SCENARIO_TIMEOUT_S` dumps every thread's stack to stderr and ends the process (its file still says "running").
"""

from __future__ import annotations

import faulthandler
import gc
import json
import os
import sys
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from accelerate import Accelerator

from maxent_grpo.cli.commands.train import end_training
from tests.distributed import (
    probe_collective_reward,
    probe_fsdp2,
    probe_gradient,
    probe_tools,
    probe_train,
    probe_unscored,
)

SCENARIO_TIMEOUT_S = 600  # what one launch per scenario was given

#: ``scenario(output_dir)``: train, return this process's record (JSON-able) and the accelerator.
Scenario = Callable[[Path], tuple[dict[str, Any], Accelerator]]


def scenarios(model_dir: str) -> dict[str, Scenario]:
    """Every scenario by name; FSDP2 loads the tiny model saved in ``model_dir``."""
    return {
        **{mode: partial(probe_train.run, mode=mode) for mode in probe_train.MODES},
        **{f"gradient-{loss}": partial(probe_gradient.run, loss_type=loss) for loss in ("grpo", "bnpo")},
        "collective_reward": probe_collective_reward.run,
        "unscored_on_one_process": probe_unscored.run,
        **{f"tools-{policy}": partial(probe_tools.run, policy=policy) for policy in ("feedback", "retry")},
        "fsdp2": partial(probe_fsdp2.run, model_dir=model_dir),
    }


def main() -> None:
    output_dir, model_dir, names = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
    table = scenarios(model_dir)
    unknown = sorted(set(names) - set(table))
    if unknown:
        raise SystemExit(f"unknown scenarios {unknown}; known: {sorted(table)}")
    rank = int(os.environ["RANK"])  # set by the launcher, before any process group exists
    accelerator = None
    for name in names:
        folder = output_dir / name
        folder.mkdir(parents=True, exist_ok=True)
        result = folder / f"rank{rank}.json"
        result.write_text(json.dumps({"status": "running"}))
        faulthandler.dump_traceback_later(SCENARIO_TIMEOUT_S, exit=True)
        try:
            record, accelerator = table[name](folder)
        except BaseException:
            error = f"scenario {name!r} raised on process {rank}:\n{traceback.format_exc()}"
            result.write_text(json.dumps({"status": "error", "traceback": error}))
            sys.stderr.write(error)
            sys.stderr.flush()
            os._exit(1)  # no teardown: the other process may be blocked in a collective; the launcher ends it
        faulthandler.cancel_dump_traceback_later()
        result.write_text(json.dumps({"status": "ok", "record": record}))
        # Let go of this scenario's model, optimizer and data loaders (DDP's reducer with them) while the process
        # group is still registered, as `end_training` does before destroying it.
        accelerator.free_memory()
        gc.collect()
    if accelerator is not None:
        end_training(accelerator)


if __name__ == "__main__":
    main()
