"""Hosts on a private network, made of Linux network namespaces: a cluster's nodes on one machine, for tests.

`network_hosts(n)` creates ``n`` namespaces ("hosts"), each with its loopback up and one interface, `INTERFACE`,
addressed ``198.18.0.<i + 1>/24`` (198.18.0.0/15 is the range set aside for network benchmarks: it is nobody's
network), wired by a veth pair to a bridge that lives in one more namespace of its own. Nothing is created in, or
routed to, the machine's own network namespace: the hosts reach each other and nothing else. Namespace names carry a
random suffix, so that concurrent runs do not collide (the interfaces are named inside namespaces of their own).

A process runs on a host through ``ip netns exec`` (`Host.command`); the hosts share the file system, the way nodes of
a cluster share a network file system. However the ``with`` block ends (an exception, a timeout, Ctrl-C), every
process left on the hosts is killed and every namespace and link it created is deleted. For example::

    with network_hosts(2) as (server, client):
        subprocess.Popen(server.command(["python", "-m", "http.server", "--bind", server.address, "8000"]))
        subprocess.run(client.command(["curl", f"http://{server.address}:8000"]))

Creating namespaces takes root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2's ``ip``: `unavailable` says why they
cannot be created here, for a test to skip.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass

#: The hosts' network, a /24 of 198.18.0.0/15; host ``i`` is ``<SUBNET>.<i + 1>``.
SUBNET = "198.18.0"
PREFIX_LENGTH = 24
#: Each host's one interface (besides loopback), the name to give ``GLOO_SOCKET_IFNAME`` there.
INTERFACE = "eth0"
_BRIDGE = "br0"


@dataclass(frozen=True)
class Host:
    """One host: its network namespace and its address on `INTERFACE`."""

    namespace: str
    address: str
    interface: str = INTERFACE

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run on this host (in its network namespace)."""
        return ["ip", "netns", "exec", self.namespace, *argv]


def _ip(*args: str) -> None:
    """``ip args``; RuntimeError with its message when it fails."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip() or f'exit {done.returncode}'}")


def _namespaces() -> set[str]:
    """The names of the machine's named network namespaces (``ip netns list``)."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in listed.splitlines() if line.strip()}


def unavailable() -> str | None:
    """Why network namespaces cannot be created here (not root, no ``ip``, ``ip netns add`` refused), or None."""
    if os.geteuid() != 0:
        return f"creating network namespaces (ip netns add) needs root; this runs as uid {os.geteuid()}"
    if shutil.which("ip") is None:
        return "creating network namespaces needs iproute2's ip command, which is not installed"
    probe = f"probe-{secrets.token_hex(4)}"
    try:
        _ip("netns", "add", probe)
    except RuntimeError as error:
        return f"network namespaces cannot be created here: {error}"
    try:
        _ip("netns", "delete", probe)
    except RuntimeError as error:
        return f"network namespaces cannot be deleted here: {error}"
    return None


def _pids(namespace: str) -> list[int]:
    listed = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True, check=False).stdout
    return [int(pid) for pid in listed.split()]


def _kill_processes(namespace: str, wait: float = 10.0) -> None:
    """SIGKILL to every process still in ``namespace`` (those the hosts' commands started, and what they started),
    again until none is left or ``wait`` seconds have passed (a process may start one more while it is killed)."""
    deadline = time.monotonic() + wait
    while (pids := _pids(namespace)) and time.monotonic() < deadline:
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


@contextmanager
def network_hosts(count: int) -> Iterator[tuple[Host, ...]]:
    """``count`` hosts on one bridge (see the module docstring); all of it deleted when the block ends.

    Raises:
        RuntimeError: an ``ip`` command failed while creating them (what was created is deleted first), or a
            namespace it created is still there after deleting it.
    """
    suffix = secrets.token_hex(4)
    bridge = f"mgrpo-{suffix}-bridge"
    hosts = tuple(Host(f"mgrpo-{suffix}-host{i}", f"{SUBNET}.{i + 1}") for i in range(count))
    created: list[str] = []  # namespaces, in the order they were created
    try:
        _ip("netns", "add", bridge)
        created.append(bridge)
        _ip("-n", bridge, "link", "add", _BRIDGE, "type", "bridge")
        _ip("-n", bridge, "link", "set", _BRIDGE, "up")
        for index, host in enumerate(hosts):
            _ip("netns", "add", host.namespace)
            created.append(host.namespace)
            _ip("-n", host.namespace, "link", "set", "lo", "up")
            port = f"port{index}"  # the pair's end on the bridge
            pair = ("type", "veth", "peer", "name", port, "netns", bridge)
            _ip("-n", host.namespace, "link", "add", host.interface, *pair)
            _ip("-n", bridge, "link", "set", port, "master", _BRIDGE, "up")
            _ip("-n", host.namespace, "address", "add", f"{host.address}/{PREFIX_LENGTH}", "dev", host.interface)
            _ip("-n", host.namespace, "link", "set", host.interface, "up")
        yield hosts
    finally:
        for namespace in reversed(created):
            _kill_processes(namespace)
        if bridge in created:
            for index in range(len(created) - 1):  # deleting one end of a veth pair deletes both
                with suppress(RuntimeError):  # the pair was not created: its host's setup failed before
                    _ip("-n", bridge, "link", "delete", f"port{index}")
        for namespace in reversed(created):
            with suppress(RuntimeError):
                _ip("netns", "delete", namespace)
        left = sorted(_namespaces() & set(created))
        if left:
            raise RuntimeError(f"network namespaces left after deleting them: {left}")
