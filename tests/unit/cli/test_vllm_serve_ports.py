"""`maxent-grpo vllm-serve`'s port checks on real sockets: a port something listens on is refused before the server
starts, and a ready server sharing its port with another process's listener is not taken for ours alone."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys

from maxent_grpo.cli.commands.vllm_serve import _other_listeners, port_in_use


def listener(reuse_port: bool = False) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    return sock


def test_a_port_something_listens_on_is_refused_and_a_free_one_is_not() -> None:
    with listener() as taken:
        port = taken.getsockname()[1]
        assert port_in_use("127.0.0.1", port) == f"port {port} on 127.0.0.1 is already in use (another server?)"
    assert port_in_use("127.0.0.1", port) is None


def test_a_listener_of_another_process_group_on_the_port_is_found() -> None:
    ours = listener(reuse_port=True)
    port = ours.getsockname()[1]
    options = argparse.Namespace(port=port, host="127.0.0.1")
    # Another process, in a session of its own, listening on the same port as vLLM does (SO_REUSEPORT).
    script = (
        "import socket, sys, time\nsock = socket.socket()\n"
        "sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)\n"
        f"sock.bind(('127.0.0.1', {port}))\nsock.listen(1)\nprint('listening', flush=True)\ntime.sleep(60)\n"
    )
    try:
        assert _other_listeners(os.getpgid(0), options) is None  # only this process group listens
        other = subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True
        )
        try:
            assert other.stdout is not None and other.stdout.readline().strip() == "listening"
            problem = _other_listeners(os.getpgid(0), options)
            assert problem == f"port {port} on 127.0.0.1 is also served by another process (another server?)"
        finally:
            other.kill()
            other.wait()
    finally:
        ours.close()
