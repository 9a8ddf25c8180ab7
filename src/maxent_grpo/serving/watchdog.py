"""The watchdog that ends `maxent-grpo vllm-serve`'s server when the command itself dies without ending it.

Run as ``python -I watchdog.py COMMAND_PID SERVER_GROUP`` (a file, not a module of the package, so that it
imports nothing but the standard library), in a session of its own. It polls the command; once the command is gone
while the server's process group still has processes (the command was killed with SIGKILL, or by the out-of-memory
killer, and could not stop it), it does what the command would have done: SIGINT to the group (vLLM shuts its engine
down on it), SIGKILL to what is left after a grace period. It exits as soon as the group is gone, whoever ended it.

A kernel parent-death signal is not enough here: it reaches the server's API process only, and one still starting up
can die of it and leave its engine processes running.
"""

from __future__ import annotations

import os
import signal
import sys
import time

POLL_SECONDS = 0.5
GRACE_SECONDS = 30.0


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def group_alive(group: int) -> bool:
    """Whether process group ``group`` still has a process."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def watch(command: int, group: int) -> None:
    """Wait while ``command`` runs; if it is gone and ``group`` is not, end ``group`` (see the module docstring)."""
    while alive(command):
        if not group_alive(group):
            return
        time.sleep(POLL_SECONDS)
    for number, wait in ((signal.SIGINT, GRACE_SECONDS), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(group, number)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while group_alive(group) and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)


if __name__ == "__main__":
    watch(int(sys.argv[1]), int(sys.argv[2]))
