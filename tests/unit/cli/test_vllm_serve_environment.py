"""What `maxent-grpo vllm-serve` hands its server besides the command line: the watchdog it starts as a file, and an
environment whose weights root and opened routes come from its own flags only."""

from __future__ import annotations

import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from maxent_grpo.cli.commands.vllm_serve import _WATCHDOG, serve_environment
from maxent_grpo.serving import routes
from maxent_grpo.serving.reload_extension import WEIGHTS_ROOT_VARIABLE


def test_the_watchdog_is_a_file_the_command_can_run_in_isolated_mode():
    assert _WATCHDOG.is_file(), _WATCHDOG
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    group = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    # Reaped the moment it dies, as init reaps a server whose command is gone: a zombie still counts as a process of
    # its group, and the watchdog would wait out its whole grace period for it.
    reaped = ThreadPoolExecutor(1).submit(group.wait)
    try:  # the command is gone and the group is not: the watchdog ends the group, then exits 0
        done = subprocess.run([sys.executable, "-I", str(_WATCHDOG), str(ended.pid), str(group.pid)], timeout=20)
        assert done.returncode == 0
        assert reaped.result(timeout=5) == -signal.SIGINT  # SIGINT first, as the command would have sent
    finally:
        group.kill()


def test_the_weights_root_and_opened_routes_come_from_the_flags_only(tmp_path):
    inherited = {WEIGHTS_ROOT_VARIABLE: "/", routes.ALLOWED_ROUTES_VARIABLE: "/pause,/sleep", "KEEP": "1"}
    environment = serve_environment(inherited, "disk")
    assert WEIGHTS_ROOT_VARIABLE not in environment and routes.ALLOWED_ROUTES_VARIABLE not in environment
    assert environment["KEEP"] == "1" and environment["VLLM_SERVER_DEV_MODE"] == "1"
    environment = serve_environment(inherited, "disk", weights_root=tmp_path, allowed_routes=["/sleep", "/wake_up"])
    assert environment[WEIGHTS_ROOT_VARIABLE] == str(tmp_path.resolve())
    assert environment[routes.ALLOWED_ROUTES_VARIABLE] == "/sleep,/wake_up"
