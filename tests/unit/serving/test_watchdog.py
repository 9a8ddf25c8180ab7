"""The vllm-serve watchdog on real processes: it ends the server's process group once the command is gone, and
leaves as soon as the group is gone while the command runs."""

from __future__ import annotations

import subprocess
import sys
import threading

from maxent_grpo.serving import watchdog as server_watchdog

# SIGINT gets Python's own handler back: a process started from a background shell (CI) inherits it ignored, and a
# vLLM server installs its own.
SLEEP = "import signal, time; signal.signal(signal.SIGINT, signal.default_int_handler); time.sleep(120)"


def sleeper(**popen: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", SLEEP], **popen)


def test_the_group_is_ended_once_the_command_is_gone() -> None:
    command, server = sleeper(), sleeper(start_new_session=True)
    try:
        watcher = threading.Thread(target=server_watchdog.watch, args=(command.pid, server.pid))
        watcher.start()
        assert server.poll() is None
        command.kill()
        command.wait()
        assert server.wait(timeout=30) != 0  # ended by SIGINT
        watcher.join(timeout=30)
        assert not watcher.is_alive()
    finally:
        for process in (command, server):
            process.kill()
            process.wait()


def test_the_watchdog_leaves_when_the_group_is_gone_first() -> None:
    command, server = sleeper(), sleeper(start_new_session=True)
    try:
        watcher = threading.Thread(target=server_watchdog.watch, args=(command.pid, server.pid))
        watcher.start()
        server.kill()
        server.wait()
        watcher.join(timeout=30)
        assert not watcher.is_alive() and command.poll() is None  # the command is left running
    finally:
        for process in (command, server):
            process.kill()
            process.wait()
