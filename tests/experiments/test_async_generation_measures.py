"""What `benchmarks/async_generation.py` measures of the server it starts (its CPU waits, descendants included) and
which server it trains against; the vllm tier runs the benchmark itself, against a server started for the session."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.benchmark_script import load_benchmark

BUSY = "import time\nend = time.process_time() + 1.0\nwhile time.process_time() < end: pass"


def test_runqueue_wait_counts_a_process_and_its_descendants() -> None:
    benchmark = load_benchmark("async_generation")
    core = min(os.sched_getaffinity(0))
    # An idle parent and its two children, both busy on one core: each child waits for the other's turns on it.
    spawn = f"subprocess.Popen([sys.executable, '-c', {BUSY!r}])"
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys\nchildren = [{spawn}, {spawn}]\nfor c in children: c.wait()"],
        preexec_fn=lambda: os.sched_setaffinity(0, {core}),
    )
    try:
        waited = 0.0
        for _ in range(100):  # until the children have waited a while (at most 10 s; they run for about 2)
            waited = benchmark.runqueue_wait(parent.pid)
            if waited > 0.3:
                break
            subprocess.run(["sleep", "0.1"], check=True)
        assert waited > 0.3  # the children's waits (about 1 s each by the end), the parent's are next to none
    finally:
        parent.kill()
        parent.wait()


def test_the_server_is_started_on_the_port_unless_a_running_one_is_given() -> None:
    benchmark = load_benchmark("async_generation")
    started = benchmark.parse_args(["--port", "8200"])
    assert (started.started_server, started.server_url) == (True, "http://127.0.0.1:8200")
    given = benchmark.parse_args(["--server-url", "http://127.0.0.1:9000"])
    assert (given.started_server, given.server_url) == (False, "http://127.0.0.1:9000")
    with pytest.raises(SystemExit):
        benchmark.parse_args(["--steps", "2"])
    with pytest.raises(SystemExit):  # one run per arm gives no run-to-run variance: refused before anything runs
        benchmark.parse_args(["--rounds", "1"])
