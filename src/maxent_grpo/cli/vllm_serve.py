"""`maxent-grpo vllm-serve`: start a vLLM server with the flags this trainer needs, wait for it, print its URL.

The server is vLLM's OpenAI-compatible one (``python -m vllm.entrypoints.openai.api_server``, what ``vllm serve``
runs; the console script of vLLM's CPU build cannot find its own version). `serve_command` and `serve_environment`
give its command line and environment for a weight transfer (``vllm_weight_transfer``):

- always ``--logprobs-mode processed_logprobs`` (TRL's importance-sampling correction needs the sampled tokens'
  log-probs after temperature and logit processing);
- ``disk``: ``--worker-extension-cls`` naming this package's reload extension and ``VLLM_SERVER_DEV_MODE=1`` (the
  trainer uses ``/pause``, ``/collective_rpc``, ``/resume``, ``/update_weight_version`` and ``/weight_info``);
- ``nccl``: ``--weight-transfer-config '{"backend": "nccl"}'`` and ``VLLM_SERVER_DEV_MODE=1`` (TRL's client).

Arguments after the model are passed on to vLLM unchanged (``--dtype``, ``--max-model-len``, ...).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

import requests

from maxent_grpo.training.generation.backends.server_reload_extension import EXTENSION_QUALNAME

WEIGHT_TRANSFERS = ("disk", "nccl")
_POLL_SECONDS = 1.0
_GRACE_SECONDS = 30.0


def serve_command(
    model: str, *, host: str, port: int, weight_transfer: str | None, vllm_args: Sequence[str] = ()
) -> list[str]:
    """The command line of a vLLM server for ``weight_transfer`` (``"disk"``, ``"nccl"``, or None for none)."""
    if weight_transfer not in (*WEIGHT_TRANSFERS, None):
        raise ValueError(f"weight_transfer must be one of {WEIGHT_TRANSFERS} or None, got {weight_transfer!r}")
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model]
    command += ["--host", host, "--port", str(port), "--logprobs-mode", "processed_logprobs"]
    if weight_transfer == "disk":
        command += ["--worker-extension-cls", EXTENSION_QUALNAME]
    elif weight_transfer == "nccl":
        command += ["--weight-transfer-config", json.dumps({"backend": "nccl"})]
    return command + list(vllm_args)


def serve_environment(base: Mapping[str, str], weight_transfer: str | None) -> dict[str, str]:
    """``base`` plus what the server needs for ``weight_transfer``: its development endpoints."""
    return {**base, "VLLM_SERVER_DEV_MODE": "1"} if weight_transfer is not None else dict(base)


def wait_until_ready(process: subprocess.Popen[bytes], base_url: str, timeout: float) -> str | None:
    """Poll ``GET /health`` until it answers 200 (return None), the process exits or ``timeout`` passes (why not)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return f"the vLLM server exited with code {process.returncode}"
        try:
            if requests.get(f"{base_url}/health", timeout=_POLL_SECONDS).status_code == 200:
                return None
        except requests.RequestException:
            pass
        time.sleep(_POLL_SECONDS)
    return f"the vLLM server did not become ready within {timeout:g} s"


def parser(prog: str, parser_class: type[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    result = parser_class(
        prog=prog,
        description="Start a vLLM server for MaxEnt-GRPO's server mode, wait until it is ready and print the URL to "
        "pass as vllm_server_base_url. Arguments after the model that this command does not know go to vLLM.",
    )
    result.add_argument("model", help="model id or path the server serves (the model being trained)")
    result.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    result.add_argument("--port", type=int, default=8000, help="port to listen on (default: %(default)s)")
    result.add_argument(
        "--weight-transfer",
        choices=WEIGHT_TRANSFERS,
        default="disk",
        help="how the trainer pushes weights (its vllm_weight_transfer): 'disk' (CPU or GPU, survives restarts) or "
        "'nccl' (GPU trainer and server; default: %(default)s)",
    )
    result.add_argument(
        "--ready-timeout", type=float, default=600.0, help="seconds to wait for the server (default: %(default)s)"
    )
    return result


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run(options: argparse.Namespace, vllm_args: Sequence[str]) -> tuple[int, str | None]:
    """Start the server, report when it is ready, and wait for it; return its exit code and, if it never became
    ready, why."""
    command = serve_command(
        options.model,
        host=options.host,
        port=options.port,
        weight_transfer=options.weight_transfer,
        vllm_args=vllm_args,
    )
    every_address = options.host in ("0.0.0.0", "::")
    base_url = f"http://{'127.0.0.1' if every_address else options.host}:{options.port}"
    print(" ".join(command), flush=True)
    # The server and its engine process in a process group of their own, ended together by `_stop`; SIGTERM (a job
    # scheduler, `kill`) ends this command the way Ctrl-C does, so the server goes with it.
    process = subprocess.Popen(
        command, env=serve_environment(os.environ, options.weight_transfer), start_new_session=True
    )
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        problem = wait_until_ready(process, base_url, options.ready_timeout)
        if problem is not None:
            return 1, problem
        elsewhere = f" (from other machines: http://{socket.gethostname()}:{options.port})" if every_address else ""
        print(
            f"vLLM server ready at {base_url}{elsewhere}: train with use_vllm=True, vllm_mode='server', "
            f"vllm_server_base_url={base_url}, vllm_weight_transfer='{options.weight_transfer}'",
            flush=True,
        )
        code = process.wait()
        return code, None if code == 0 else f"the vLLM server at {base_url} exited with code {code}"
    finally:
        signal.signal(signal.SIGTERM, previous)
        _stop(process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGINT to the server's process group (vLLM shuts down cleanly on it), SIGKILL to what is left after a grace
    period (the engine process outlives a server that died)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=_GRACE_SECONDS)
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
