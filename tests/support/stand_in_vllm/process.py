"""Start the stand-in server (`server.py`) as a real subprocess for the duration of a test (or a module)."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO

SERVER_SCRIPT = Path(__file__).resolve().with_name("server.py")
_GRACE_SECONDS = 5.0
_STDERR_TAIL_CHARS = 4000


def _pump_stdout(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    """Forward the server's stdout lines (the READY line first), then None at end of stream."""
    for line in stream:
        lines.put(line)
    lines.put(None)


def _stderr_tail(stderr: IO[bytes]) -> str:
    stderr.flush()
    stderr.seek(0)
    return stderr.read().decode(errors="replace")[-_STDERR_TAIL_CHARS:]


def _wait_for_ready(process: subprocess.Popen[str], lines: queue.Queue[str | None], timeout: float) -> int | None:
    """Return the port from the server's ``READY <port>`` line, or None if it exited or timed out first."""
    deadline = time.monotonic() + timeout
    while (remaining := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=remaining)
        except queue.Empty:
            return None
        if line is None:
            return None
        if line.startswith("READY "):
            return int(line.split()[1])
    return None


def _stop(process: subprocess.Popen[str]) -> None:
    """SIGTERM, then SIGKILL after a grace period."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# Start-up is mostly imports; on a loaded 2-core machine eight servers starting at once were seen to need over 60 s.
READY_TIMEOUT = 180.0


@contextmanager
def run_test_server_process(
    *flags: str, model_dir: str | Path | None = None, timeout: float = READY_TIMEOUT
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """Run the test server with ``flags`` and yield its base URL ``http://127.0.0.1:<port>`` and its process (to send
    it signals: ``SIGUSR1`` switches hanging on and off).

    ``model_dir`` is passed as ``--model`` (default: the server builds the tiny model in-process). Raises
    RuntimeError, with the tail of the server's stderr, when it is not ready within ``timeout`` seconds.
    """
    command = [sys.executable, str(SERVER_SCRIPT), "--port", "0", *flags]
    if model_dir is not None:
        command += ["--model", str(model_dir)]
    with tempfile.TemporaryFile() as stderr:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True)
        assert process.stdout is not None
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_pump_stdout, args=(process.stdout, lines), daemon=True).start()
        try:
            port = _wait_for_ready(process, lines, timeout)
            if port is None:
                _stop(process)
                raise RuntimeError(
                    f"test server {' '.join(command)} not ready within {timeout} s (exit code {process.poll()}); "
                    f"stderr tail:\n{_stderr_tail(stderr)}"
                )
            yield f"http://127.0.0.1:{port}", process
        finally:
            _stop(process)
            process.stdout.close()


@contextmanager
def run_test_server(*flags: str, model_dir: str | Path | None = None, timeout: float = READY_TIMEOUT) -> Iterator[str]:
    """Run the test server with ``flags`` and yield its base URL ``http://127.0.0.1:<port>`` (see
    `run_test_server_process`)."""
    with run_test_server_process(*flags, model_dir=model_dir, timeout=timeout) as (url, _):
        yield url


@contextmanager
def run_test_server_processes(
    flag_sets: Mapping[str, Sequence[str]], *, model_dir: str | Path | None = None, timeout: float = READY_TIMEOUT
) -> Iterator[dict[str, tuple[str, subprocess.Popen[str]]]]:
    """Start one server per entry of ``flag_sets`` at once and yield ``{name: (base URL, process)}``.

    Start-up is mostly imports, so starting the servers side by side takes little longer than starting one. If any
    fails to start, the others are stopped and its error is raised.
    """
    managers = {
        name: run_test_server_process(*flags, model_dir=model_dir, timeout=timeout)
        for name, flags in flag_sets.items()
    }
    with ExitStack() as stack:
        with ThreadPoolExecutor(max_workers=max(len(managers), 1)) as pool:
            futures = {name: pool.submit(manager.__enter__) for name, manager in managers.items()}
        started: dict[str, tuple[str, subprocess.Popen[str]]] = {}
        errors: list[RuntimeError] = []
        for name, future in futures.items():
            try:
                started[name] = future.result()
            except RuntimeError as exc:
                errors.append(exc)
            else:
                stack.push(managers[name].__exit__)
        if errors:
            raise errors[0]
        yield started


@contextmanager
def run_test_servers(
    flag_sets: Mapping[str, Sequence[str]], *, model_dir: str | Path | None = None, timeout: float = READY_TIMEOUT
) -> Iterator[dict[str, str]]:
    """Start one server per entry of ``flag_sets`` at once and yield ``{name: base URL}``
    (`run_test_server_processes`)."""
    with run_test_server_processes(flag_sets, model_dir=model_dir, timeout=timeout) as started:
        yield {name: url for name, (url, _) in started.items()}
