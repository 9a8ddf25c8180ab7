"""A real vLLM OpenAI-compatible server process on 127.0.0.1, for the vllm test tier and the vLLM benchmark."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import requests

from maxent_grpo.cli.vllm_serve import serve_command, serve_environment

_STDERR_TAIL_CHARS = 4000


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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

    def wait_ready(self, timeout: float = 300.0) -> None:
        """Wait until ``GET /health`` answers 200; RuntimeError with the server's log tail if it exits or times out."""
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vLLM server exited with code {self.process.returncode}:\n{self.log_tail()}")
            try:
                if requests.get(f"{self.base_url}/health", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.5)
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
