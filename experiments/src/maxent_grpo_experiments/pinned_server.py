"""A real vLLM server for the transfer benchmarks, started as `maxent-grpo vllm-serve` starts one (disk weight
reloads), on one CPU core of its own.

Pinning the process is not enough: vLLM's CPU build binds its OpenMP threads to every core it finds unless
``VLLM_CPU_OMP_THREADS_BIND`` names them, and a trainer's ``OMP_NUM_THREADS`` is not the server's. More threads than
cores wait on each other and slow every step, not only the part a benchmark measures.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from maxent_grpo.cli.commands.vllm_serve import serve_command, serve_environment


def start_pinned_server(model_dir: Path, port: int, core: int | None, max_model_len: int) -> subprocess.Popen[bytes]:
    """Start a float32 server of ``model_dir`` on 127.0.0.1:``port``, its process and OpenMP threads on ``core`` (None:
    neither pinned nor bound); its output is discarded. The caller waits for it (`wait_until_ready`) and ends it."""
    command = serve_command(
        str(model_dir),
        host="127.0.0.1",
        port=port,
        weight_transfer="disk",
        vllm_args=["--dtype", "float32", "--max-model-len", str(max_model_len), "--enforce-eager"],
    )
    base = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    if core is not None:
        base["VLLM_CPU_OMP_THREADS_BIND"] = str(core)
    base.pop("OMP_NUM_THREADS", None)  # the trainer's setting, not the server's
    pin = None if core is None else (lambda: os.sched_setaffinity(0, {core}))
    return subprocess.Popen(
        command,
        env=serve_environment(base, "disk"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=pin,
    )
