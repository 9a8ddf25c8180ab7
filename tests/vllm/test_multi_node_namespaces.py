"""A multi-node run for real, on one machine: two trainer nodes and a generation host in network namespaces.

Three hosts on a private network (`tests.support.network_namespaces`: 198.18.0.1 node 0, 198.18.0.2 node 1,
198.18.0.3 the generation host, each in a network namespace of its own, wired to one bridge): the generation host
runs `maxent-grpo vllm-serve` listening on its own address, with a key (it listens beyond loopback) and a weights
root; each node runs ``accelerate launch --config_file configs/accelerate/multi_node.yaml --machine_rank R
--main_process_ip 198.18.0.1 ...`` with one gloo process over its own interface, as a user starts a run on two
machines. Each process runs `tests/distributed/probe_server.py`'s ``ddp`` and ``async-fault`` variants (the fault on
node 1's generation) in one launch, against the server, with the key and the disk weight transfer through a directory
all three hosts reach (the machine's file system, as a network file system would be on a cluster). The checks are the
two-process tests' (`assert_one_pusher_on_policy`; `check_generated_ahead_with_one_pusher`): the same
calls and the same drops on both nodes, node 0 alone pushes, the server serves the trained weights; and both nodes
end with the same weights. It skips where network namespaces cannot be created (it needs root).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.distributed.test_two_processes import Launch
from tests.e2e.cli_runner import executable, offline_env
from tests.support import network_namespaces
from tests.support.network_namespaces import Host, network_hosts
from tests.support.server_logprobs import assert_one_pusher_on_policy
from tests.vllm.test_server_two_processes import check_generated_ahead_with_one_pusher
from tests.vllm.test_vllm_serve_command import VLLM_ARGS

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "accelerate" / "multi_node.yaml"
PROBE = ROOT / "tests" / "distributed" / "probe_server.py"
VARIANTS = ("ddp", "async-fault")
KEY = "only-the-nodes-7c2e"
SERVER_PORT = 8000  # each host is a network namespace of its own: nothing else listens there
MAIN_PROCESS_PORT = 29500
SERVER_TIMEOUT = 240.0
LAUNCH_TIMEOUT = 420.0
READY_LINE = "vLLM server ready at"
NOISE = ("Warning:", "warnings.warn(")  # lines left out of a node's output (as `test_two_processes` leaves them)
EXIT_BARRIER_ERROR = "Error waiting on exit barrier"


class Progress:
    """Prints what the test is doing, with the seconds since it started."""

    def __init__(self) -> None:
        self.start = time.monotonic()

    def __call__(self, message: str) -> None:
        print(f"[multi-node {time.monotonic() - self.start:6.1f} s] {message}", flush=True)


@pytest.fixture
def hosts() -> Iterator[tuple[Host, ...]]:
    """Node 0, node 1 and the generation host; skips where network namespaces cannot be created."""
    reason = network_namespaces.unavailable()
    if reason is not None:
        pytest.skip(reason)
    with network_hosts(3) as created:
        yield created


def start(host: Host, argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """``argv`` on ``host`` in a session of its own (ended as a group), its output (both streams) into ``log``."""
    with log.open("wb") as output:
        return subprocess.Popen(
            host.command(argv), cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )


def end(process: subprocess.Popen[bytes], number: int = signal.SIGKILL) -> None:
    """Signal ``number`` to ``process``'s group, then SIGKILL to what is left of it after a grace period."""
    try:
        os.killpg(process.pid, number)
        process.wait(timeout=60)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        return  # the whole group has exited
    process.wait()


def wait_ready(server: subprocess.Popen[bytes], log: Path, timeout: float) -> str:
    """The ready line `maxent-grpo vllm-serve` wrote to ``log``; fails with the log tail if it exits or times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if READY_LINE in line:
                return line
        if server.poll() is not None:
            break
        time.sleep(0.5)
    pytest.fail(f"no {READY_LINE!r} line within {timeout} s (exit {server.poll()}):\n{log.read_text()[-4000:]}")


def launch_nodes(
    nodes: tuple[Host, Host],
    folder: Path,
    model_dir: Path,
    base_url: str,
    env: dict[str, str],
    progress: Progress,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    """One ``accelerate launch`` per node with the multi-node config, both at once, writing under ``folder`` (their
    output in ``node<rank>.log`` there), each appended to ``processes`` as it starts (the caller ends them all). The
    trainers wait for the server (TRL's client and the backend do), so the nodes may start while it still starts."""
    accelerate = executable("accelerate")
    folder.mkdir()
    for rank, node in enumerate(nodes):
        argv = [
            accelerate, "launch", "--config_file", str(CONFIG), "--machine_rank", str(rank),
            "--main_process_ip", nodes[0].address, "--main_process_port", str(MAIN_PROCESS_PORT),
            str(PROBE), str(folder), str(model_dir), base_url, *VARIANTS,
        ]  # fmt: skip
        node_env = {**env, "GLOO_SOCKET_IFNAME": node.interface}  # gloo's one interface on that host
        processes.append(start(node, argv, node_env, folder / f"node{rank}.log"))
    progress(f"launched node 0 on {nodes[0].address} and node 1 on {nodes[1].address}")


def wait_nodes(processes: list[subprocess.Popen[bytes]], folder: Path, progress: Progress) -> list[Launch]:
    """Each node's outcome: its exit code and output, once it exits (killed if it still runs `LAUNCH_TIMEOUT` s after
    this call, which comes once the server is ready)."""
    deadline = time.monotonic() + LAUNCH_TIMEOUT
    launches = []
    for rank, process in enumerate(processes):
        try:
            returncode: int | None = process.wait(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            returncode = None
        end(process)
        output = (folder / f"node{rank}.log").read_text(errors="replace")
        if returncode is None:
            output += f"\nkilled {LAUNCH_TIMEOUT} s after the server was ready"
        kept = [line for line in output.splitlines() if not any(noise in line for noise in NOISE)]
        launches.append(Launch(returncode, "", "\n".join(without_exit_barrier_race(kept))))
        progress(f"node {rank} exited with {returncode}")
    return launches


def without_exit_barrier_race(lines: list[str]) -> list[str]:
    """``lines`` without the record torch's elastic agent logs when node 0's agent, which holds the rendezvous store,
    exits while another node's agent still waits at the exit barrier (pytorch/pytorch#69520, a race in torchrun
    itself after every worker has finished; the node still exits 0). Only that one record goes: its first line names
    the exit barrier, and the lines that follow with the same log prefix (its traceback) go with it; anything else
    the agent logged stays and still fails the check."""
    kept: list[str] = []
    prefix: str | None = None
    for line in lines:
        if EXIT_BARRIER_ERROR in line and "] " in line:
            prefix = line.split("] ", 1)[0]
            continue
        if prefix is not None and line.startswith(f"{prefix}] "):
            continue
        prefix = None
        kept.append(line)
    return kept


def test_exit_barrier_race_record_is_left_out_and_nothing_else() -> None:
    record = [
        "E1205 01:12:01.719000 17025 torch/distributed/elastic/agent/server/api.py:1008] Error waiting on exit "
        "barrier. Elapsed: 0.05 seconds",
        "E1205 01:12:01.719000 17025 torch/distributed/elastic/agent/server/api.py:1008] Traceback (most recent "
        "call last):",
        "E1205 01:12:01.719000 17025 torch/distributed/elastic/agent/server/api.py:1008] torch.distributed."
        "DistNetworkError: Failed to recv, got 0 bytes.",
    ]
    other = ["Traceback (most recent call last):", '  File "probe_server.py", line 1, in <module>', "ValueError: x"]
    assert without_exit_barrier_race(["{'train_runtime': '2.9'}", *record]) == ["{'train_runtime': '2.9'}"]
    assert without_exit_barrier_race([*record, *other]) == other
    assert without_exit_barrier_race(other) == other
    assert not Launch(0, "", "\n".join(without_exit_barrier_race([*record, *other]))).clean


def test_two_nodes_train_against_a_server_on_a_third_host_over_the_network(
    hosts: tuple[Host, ...], vllm_model_dir: Path, tmp_path: Path
) -> None:
    progress = Progress()
    node0, node1, generation = hosts
    progress(f"hosts up: {', '.join(f'{host.namespace} {host.address}' for host in hosts)}")
    shared = tmp_path / "shared"  # what every host reaches: the runs' output and the weights the server loads
    shared.mkdir()
    addresses = ",".join(host.address for host in hosts)
    env = offline_env(tmp_path, no_proxy=addresses, NO_PROXY=addresses)
    serve = [
        sys.executable, "-m", "maxent_grpo.cli", "vllm-serve", str(vllm_model_dir), "--host", generation.address,
        "--port", str(SERVER_PORT), "--api-key", KEY, "--weights-root", str(shared),
        "--ready-timeout", str(SERVER_TIMEOUT), *VLLM_ARGS,
    ]  # fmt: skip
    server_log = tmp_path / "server.log"
    base_url = f"http://{generation.address}:{SERVER_PORT}"
    python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    node_env = {**env, "PYTHONPATH": python_path, "VLLM_API_KEY": KEY}  # the trainers' key, and the probe's
    server = start(generation, serve, env, server_log)
    nodes: list[subprocess.Popen[bytes]] = []
    try:  # the nodes start beside the server, as on a cluster whose jobs start together
        launch_nodes((node0, node1), shared / "runs", vllm_model_dir, base_url, node_env, progress, nodes)
        ready = wait_ready(server, server_log, SERVER_TIMEOUT + 30)
        progress(ready)
        assert ready.startswith(f"{READY_LINE} {base_url}: ") and "vllm_server_api_key=<the key>" in ready
        launches = wait_nodes(nodes, shared / "runs", progress)
    finally:
        for process in nodes:
            end(process)
        end(server, signal.SIGINT)  # the command ends its server's process group
        progress("server stopped")
    for rank, launch in enumerate(launches):
        assert launch.clean, f"node {rank}: {launch.report()}"
    runs: dict[str, list[dict[str, Any]]] = {
        variant: [json.loads((shared / "runs" / variant / f"rank{r}.json").read_text()) for r in (0, 1)]
        for variant in VARIANTS
    }
    for variant, (rank0, rank1) in runs.items():
        print(f"{variant}: checksums {rank0['checksum']}, {rank1['checksum']}")
        assert rank0["checksum"] == pytest.approx(rank1["checksum"], abs=1e-9)  # the same weights on both nodes
        assert rank0["dropped_prompts"] == rank1["dropped_prompts"]
        weights = list((shared / "runs" / variant / "_vllm-weights").rglob("*.safetensors"))
        assert weights, "node 0 pushed through the shared directory"
    rank0, rank1 = runs["ddp"]
    assert_one_pusher_on_policy(rank0, rank1)
    check_generated_ahead_with_one_pusher(runs, "async-fault")
