"""A real vLLM OpenAI-compatible server process on 127.0.0.1, for the vllm test tier and the vLLM benchmark.

`VLLMServerProcess` is one server process; `running_vllm_server` starts one for a ``with`` block; `SharedVLLMServer`
is one server shared by many tests (the vllm tier's session server): killed and restarted on the same port by the
tests that need a restart, and brought back to its launch state (the model's own weights, the launch weight version) by
`SharedVLLMServer.reset` before each test that uses it.
"""

from __future__ import annotations

import copy
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import requests

from maxent_grpo.cli.commands.vllm_serve import serve_command, serve_environment
from maxent_grpo.serving.routes import RELOAD_METHOD

_STDERR_TAIL_CHARS = 4000


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(base_url: str, timeout: float, failed: Callable[[], str | None] = lambda: None) -> bool:
    """Poll ``GET /health`` of the server at ``base_url`` until it answers 200 (True) or ``timeout`` seconds pass
    (False); RuntimeError with ``failed()``'s message as soon as it returns one (the process serving it exited)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reason = failed()
        if reason is not None:
            raise RuntimeError(reason)
        try:
            if requests.get(f"{base_url}/health", timeout=2).status_code == 200:
                return True
        except requests.RequestException:
            pass
        time.sleep(0.5)
    return False


class VLLMServerProcess:
    """A vLLM server serving ``model_dir`` in float32 on ``127.0.0.1:port``, started as `maxent-grpo vllm-serve` starts
    one for ``weight_transfer`` (None: no weight transfer, a plain server), by ``python`` (default: this one; another
    environment's, where the trainer's has no vLLM)."""

    def __init__(
        self,
        model_dir: str | Path,
        port: int | None = None,
        max_model_len: int = 128,
        weight_transfer: str | None = None,
        extra_args: tuple[str, ...] = (),
        extra_env: Mapping[str, str] | None = None,
        python: str = sys.executable,
    ) -> None:
        self.port = free_port() if port is None else port
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.weight_transfer = weight_transfer
        self.extra_env = dict(extra_env or {})
        vllm_args = ["--dtype", "float32", "--max-model-len", str(max_model_len), "--enforce-eager", *extra_args]
        command = serve_command(
            str(model_dir), host="127.0.0.1", port=self.port, weight_transfer=weight_transfer, vllm_args=vllm_args
        )
        self.command = [python, *command[1:]]
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close(), it outlives this method)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> VLLMServerProcess:
        env = serve_environment(
            {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"), **self.extra_env},
            self.weight_transfer,
        )
        # A session of its own: the server's engine core is a child process that outlives a killed parent otherwise.
        self.process = subprocess.Popen(
            self.command, stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        return self

    def restarted(self) -> VLLMServerProcess:
        """A new process of the same server (command, environment, port), not started yet."""
        again = copy.copy(self)
        again._log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        again.process = None
        return again

    def wait_ready(self, timeout: float = 300.0) -> None:
        """Wait until ``GET /health`` answers 200; RuntimeError with the server's log tail if it exits or times out."""
        process = self.process
        assert process is not None

        def exited() -> str | None:
            code = process.poll()
            return None if code is None else f"vLLM server exited with code {code}:\n{self.log_tail()}"

        if not wait_healthy(self.base_url, timeout, exited):
            raise RuntimeError(f"vLLM server not ready within {timeout} s:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL to the server and its engine process, as in a crash or an out-of-memory kill."""
        self._signal(signal.SIGKILL)

    def stop(self) -> None:
        """SIGTERM to the server and its engine process, then SIGKILL after a grace period."""
        self._signal(signal.SIGTERM)
        if self.process is not None:
            with suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=20)
        self._signal(signal.SIGKILL)

    def _signal(self, number: int) -> None:
        if self.process is None:
            return
        with suppress(ProcessLookupError):  # the whole group has exited
            os.killpg(self.process.pid, number)
        if number == signal.SIGKILL:
            self.process.wait()

    def log_tail(self) -> str:
        self._log.flush()
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-_STDERR_TAIL_CHARS:]

    def close(self) -> None:
        self.stop()
        self._log.close()


@contextmanager
def running_vllm_server(
    model_dir: str | Path, port: int | None = None, timeout: float = 300.0, **options: Any
) -> Iterator[str]:
    """Start a server (``options``: `VLLMServerProcess`'s), wait until it is ready, yield its base URL; stop it
    afterwards."""
    server = VLLMServerProcess(model_dir, port, **options).start()
    try:
        server.wait_ready(timeout)
        yield server.base_url
    finally:
        server.close()


class SharedVLLMServer:
    """One disk-transfer server (`VLLMServerProcess` started with ``options``) shared by many tests.

    `kill` and `restart` (same port, same options) are for the tests about a restart; `reset` brings the server
        back to how it was launched, whatever the test before did: running (restarted if a test left it dead), serving
    the weights of ``model_dir`` under its launch version, its prefix cache emptied.
    """

    def __init__(
        self, model_dir: str | Path, reset_hooks: Sequence[Callable[[], object]] = (), **options: Any
    ) -> None:
        self.model_dir = Path(model_dir)
        self.process = VLLMServerProcess(self.model_dir, weight_transfer="disk", **options)
        self.reset_hooks = tuple(reset_hooks)  # called first by `reset` (e.g. to clear injected faults)
        self.launch_version: str | None = None  # what GET /weight_info answers on a fresh server

    @property
    def base_url(self) -> str:
        return self.process.base_url

    @property
    def port(self) -> int:
        return self.process.port

    def launch(self) -> SharedVLLMServer:
        """Start the server process without waiting for it to be ready (`start` waits)."""
        self.process.start()
        return self

    def start(self, timeout: float = 300.0) -> SharedVLLMServer:
        """Start the server process unless `launch` did, wait until it is ready and serves the launch version, and warm
        it up (`warm_up`)."""
        if self.process.process is None:
            self.process.start()
        self.process.wait_ready(timeout)
        version = self._call("GET", "/weight_info").json()["weight_version"]
        if self.launch_version is None:
            self.launch_version = version
        assert version == self.launch_version, (version, self.launch_version)
        self.warm_up(timeout)
        return self

    def kill(self) -> None:
        """SIGKILL to the server and its engine, as in a crash (see `VLLMServerProcess.kill`)."""
        self.process.kill()

    def restart(self, timeout: float = 300.0) -> SharedVLLMServer:
        """Start a new server process on the same port with the same options (the old one stopped first, if it still
        runs) and wait until it is ready and warm (`start`)."""
        self.process.close()
        self.process = self.process.restarted()
        return self.start(timeout)

    def warm_up(self, timeout: float = 300.0) -> None:
        """One one-token completion, waited for: a fresh CPU engine spends seconds on its first request (more on a
        loaded machine, enough for a pool to hedge it and mark it hung), which the tests keep out of the steps they
        measure, as a deployment's readiness check that generates would."""
        model = self._call("GET", "/v1/models").json()["data"][0]["id"]
        payload = {"model": model, "prompt": "a", "max_tokens": 1}
        answer = requests.post(f"{self.base_url}/v1/completions", json=payload, timeout=timeout)
        assert answer.status_code == 200, f"POST /v1/completions: HTTP {answer.status_code}: {answer.text[:500]}"

    def alive(self) -> bool:
        if self.process.process is None or self.process.process.poll() is not None:
            return False
        try:
            return requests.get(f"{self.base_url}/health", timeout=5).status_code == 200
        except requests.RequestException:
            return False

    def reset(self) -> None:
        """Back to the launch state (see the class docstring)."""
        for hook in self.reset_hooks:
            hook()
        if not self.alive():
            self.restart()
            return
        reload = {"method": RELOAD_METHOD, "kwargs": {"weights_path": str(self.model_dir)}}
        reports = self._call("POST", "/collective_rpc", reload).json()["results"]
        assert reports and all(not report["stale"] for report in reports), reports
        self._call("POST", "/reset_prefix_cache")
        self._call("POST", "/update_weight_version", {"new_version": self.launch_version})
        assert self._call("GET", "/weight_info").json()["weight_version"] == self.launch_version

    def close(self) -> None:
        self.process.close()

    def _call(self, method: str, path: str, payload: dict[str, Any] | None = None) -> requests.Response:
        answer = requests.request(method, f"{self.base_url}{path}", json=payload, timeout=60)
        assert answer.status_code == 200, f"{method} {path}: HTTP {answer.status_code}: {answer.text[:500]}"
        return answer
