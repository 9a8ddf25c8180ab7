"""`maxent-grpo vllm-serve` for real, on 127.0.0.1: it starts a vLLM server with the flags the disk transport needs,
prints the URL once the server is ready, a trainer given that URL pushes every version into it, and however the
command ends, its server never outlives it (every process of the server's process group, its engine included); a
server that cannot start ends it with one line. The Ctrl-C run is started with a key and a weights root: every route
the trainer uses refuses a request without the key, the reload extension refuses weights from outside the root, and
the trainer, given the key, pushes and trains.

Ctrl-C comes once the server is ready and has been trained against. SIGTERM (a job scheduler, ``kill``), SIGHUP (the
terminal or ssh session closed) and SIGKILL (nothing the command can handle: the watchdog, `serving.watchdog`, ends
the server) come while the server is still starting (its engine process runs, it is not ready yet), three commands
at once: the command turns SIGTERM and SIGHUP into the same interruption as Ctrl-C (its handlers are installed
before it starts the server), so what differs is the signal's handling, and a server cut off mid-start-up must go
with the command too; the ready line and the flags before it are the same for all and are checked on the Ctrl-C
run, which saves starting more servers up to ready.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

from maxent_grpo.serving.routes import SERVER_INFO
from maxent_grpo.training.generation.backends.transfer_agreement import served_by
from tests.e2e.cli_runner import executable, terminal_signals
from tests.support.real_vllm_server import free_port
from tests.vllm.test_server_weights import server_mode_trainer

VLLM_ARGS = ("--dtype", "float32", "--max-model-len", "128", "--enforce-eager")


def processes() -> dict[int, tuple[int, int, str]]:
    """Every process on the machine: pid -> (parent pid, process group, state letter; "Z" for an exited one)."""
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # it has gone meanwhile
            continue
        table[int(stat.parent.name)] = (int(fields[1]), int(fields[2]), fields[0])
    return table


class Command:
    """`maxent-grpo vllm-serve` as a subprocess in a session of its own, its output read line by line."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [executable("maxent-grpo"), "vllm-serve", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            preexec_fn=terminal_signals,  # it is sent Ctrl-C and hang-ups
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, text: str, timeout: float) -> str:
        """The first line holding ``text``; fails with the output so far when the output ends or time runs out."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            self.lines.append(line)
            if text in line:
                return line
        pytest.fail(f"no line with {text!r} within {timeout} s; output:\n" + "\n".join(self.lines[-60:]))

    def server_pid(self, timeout: float = 60) -> int:
        """The pid of the server the command started (its child process, the leader of a process group of its own)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            children = [pid for pid, (parent, _, _) in processes().items() if parent == self.process.pid]
            if children:
                return children[0]
            time.sleep(0.2)
        pytest.fail(f"the command started no server within {timeout} s; output:\n" + "\n".join(self.lines[-60:]))

    def signal(self, number: int) -> int:
        """``number`` to the command alone (not to the server it started); its exit code."""
        self.process.send_signal(number)
        return self.process.wait(timeout=90)

    def rest(self) -> list[str]:
        while (line := self._queue.get(timeout=30)) is not None:
            self.lines.append(line)
        return self.lines

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def group_left(server: int) -> list[int]:
    """The processes of the server's process group still running."""
    return [pid for pid, (_, group, state) in processes().items() if group == server and state != "Z"]


KEY = "only-the-trainer-4a1f"
#: The routes the trainer uses, each with a request it could make: with a key, none answers a request without it.
GUARDED = (
    ("GET", "/health", None), ("GET", "/v1/models", None), ("GET", SERVER_INFO, None),
    ("POST", "/v1/completions", {"prompt": "a", "max_tokens": 1}),
    ("POST", "/pause", None), ("POST", "/resume", None), ("GET", "/is_paused", None), ("GET", "/weight_info", None),
    ("POST", "/reset_prefix_cache", None), ("POST", "/update_weight_version", {"new_version": "x"}),
    ("POST", "/collective_rpc", {"method": "maxent_reload_weights", "args": ["/"]}),
)  # fmt: skip


def test_vllm_serve_prints_the_url_a_trainer_trains_against_and_ctrl_c_ends_it_and_its_server(
    vllm_model_dir: Path, tmp_path: Path
):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    options = ("--api-key", KEY, "--weights-root", str(tmp_path / "weights"))
    command = Command(str(vllm_model_dir), "--port", str(port), *options, *VLLM_ARGS)
    try:
        server = command.server_pid()
        ready = command.wait_for("vLLM server ready at", timeout=300)
        print(ready)
        assert ready.startswith(f"vLLM server ready at {url}: ")
        assert f"vllm_server_base_url={url}" in ready and "vllm_weight_transfer='disk'" in ready
        assert "vllm_server_api_key=<the key>" in ready
        launched = command.lines[0]  # the server's command line, printed first
        assert "--worker-extension-cls" in launched and "--logprobs-mode processed_logprobs" in launched
        assert KEY not in "\n".join(command.lines)  # the key goes to the server by its environment, never printed

        keyed = {"Authorization": f"Bearer {KEY}"}
        for method, route, body in GUARDED:  # only the trainer may push, or even look
            for headers in ({}, {"Authorization": "Bearer not-the-key"}):
                answer = requests.request(method, f"{url}{route}", json=body, headers=headers, timeout=30)
                assert answer.status_code == 401, (method, route, headers, answer.status_code, answer.text[:300])
        for route in ("/is_paused", "/pause", "/sleep"):  # the key opens the trainer's routes, no others
            answer = requests.post(f"{url}{route}", headers=keyed, timeout=30)
            assert answer.status_code == 403 and "does not serve" in answer.json()["error"], (route, answer.text)
        written = tmp_path / "written"
        written.mkdir()
        for method, kwargs in (
            ("reload_weights", {"weights_path": str(vllm_model_dir)}),
            ("save_sharded_state", {"path": str(written)}),
        ):
            answer = requests.post(
                f"{url}/collective_rpc", json={"method": method, "kwargs": kwargs}, headers=keyed, timeout=60
            )
            assert answer.status_code == 403 and "does not run the worker method" in answer.text, (method, answer.text)
        assert list(written.iterdir()) == []
        outside = requests.post(  # with the key, but weights from outside --weights-root
            f"{url}/collective_rpc",
            json={"method": "maxent_reload_weights", "args": [str(vllm_model_dir)]},
            headers=keyed,
            timeout=60,
        )
        assert outside.status_code != 200 and "outside the directory this server trusts" in outside.text, outside.text
        metrics = requests.options(f"{url}/metrics", timeout=30)  # not a preflight: the key first
        assert metrics.status_code == 401 and "vllm:" not in metrics.text
        preflight = {"Origin": "http://example.test", "Access-Control-Request-Method": "GET"}
        metrics = requests.options(f"{url}/metrics", headers=preflight, timeout=30)
        assert metrics.content == b"", metrics.text[:300]  # a real preflight passes, answered without a body
        assert "vllm:" in requests.get(f"{url}/metrics", headers=keyed, timeout=30).text

        # What the server says it serves, read as the trainer reads it: the disk transfer, the extension's own path.
        assert served_by(url, api_key=KEY, timeout=30) == {"disk"}
        trainer = server_mode_trainer(vllm_model_dir, url, tmp_path, max_steps=2, vllm_server_api_key=KEY)
        assert trainer.args.vllm_weight_transfer == "auto" and trainer.weight_transfer == "disk"  # auto follows it
        trainer.train()
        backend = trainer.generation_backend
        assert backend.stats["weight_pushes"] == 2  # the server took both versions, from under its weights root
        info = requests.get(f"{url}/weight_info", headers=keyed, timeout=10).json()
        assert info["weight_version"] == backend.weight_version

        assert command.signal(signal.SIGINT) == 130
        output = "\n".join(command.rest())  # the server writes to the same pipe: its lines may cut into the command's
        assert "maxent-grpo vllm-serve: interrupted" in output, output[-3000:]
        with pytest.raises(requests.ConnectionError):  # the server went with it
            requests.get(f"{url}/health", timeout=5)
        assert not group_left(server), "processes of the server's group still running"  # its engine went too
    finally:
        command.close()


ENDINGS = {signal.SIGTERM: 130, signal.SIGHUP: 130, signal.SIGKILL: -signal.SIGKILL}


def test_a_signal_while_the_server_starts_ends_the_command_and_its_server(vllm_model_dir: Path):
    ports = {stop: free_port() for stop in ENDINGS}
    commands = {stop: Command(str(vllm_model_dir), "--port", str(ports[stop]), *VLLM_ARGS) for stop in ENDINGS}
    try:
        servers = {stop: command.server_pid() for stop, command in commands.items()}
        deadline = time.monotonic() + 300
        for stop, server in servers.items():  # once its engine process runs
            while not [pid for pid, (parent, _, _) in processes().items() if parent == server]:
                assert commands[stop].process.poll() is None and time.monotonic() < deadline, "no engine started"
                time.sleep(0.2)
        for port in ports.values():
            with pytest.raises(requests.ConnectionError):  # not listening yet
                requests.get(f"http://127.0.0.1:{port}/health", timeout=5)
        codes = {stop: command.signal(stop) for stop, command in commands.items()}
        assert codes == ENDINGS
        for stop in (signal.SIGTERM, signal.SIGHUP):
            output = "\n".join(commands[stop].rest())
            assert "maxent-grpo vllm-serve: interrupted" in output, output[-3000:]
        deadline = time.monotonic() + 60  # SIGKILL: the watchdog ends the group (SIGINT, then SIGKILL after 30 s)
        while any(group_left(server) for server in servers.values()) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = {signal.Signals(stop).name: group_left(server) for stop, server in servers.items()}
        assert not any(left.values()), f"processes of the servers' groups still running: {left}"
    finally:
        for command in commands.values():
            command.close()


def test_vllm_serve_of_a_model_that_cannot_be_loaded_ends_with_one_line(tmp_path: Path):
    command = Command(str(tmp_path / "no-such-model"), "--port", str(free_port()), *VLLM_ARGS)
    try:
        assert command.process.wait(timeout=300) == 1
        last = command.rest()[-1]
        print(last)
        assert last.startswith("maxent-grpo vllm-serve: error: the vLLM server exited with code ")
    finally:
        command.close()
