"""Two real gloo processes (accelerate launch on CPU): groups straddle processes, drops agree, nothing misaligned.

Every scenario (the probes' `run` functions: alignment with straddling groups, faults, dynamic sampling, gradients
with a process that keeps no row, FSDP2 updates, a collective reward function, tool faults) runs in one launch of
`probe_scenarios.py`, one after another in the same two processes, each from a fresh trainer; the module fixture
`scenario_results` makes that launch and each test checks what its scenario recorded on both processes. A scenario
that raised fails only its own tests, with its traceback (`run_scenarios` launches again the scenarios after it); a
launch that does not end cleanly (exit 0, no traceback) for any other reason fails the tests of every scenario it ran.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.e2e.cli_runner import executable
from tests.support.two_step_update import (
    LOSS_TYPES,
    OPTIMIZERS,
    assert_empty_step_left_no_trace,
    assert_stock_update,
)

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

ROOT = Path(__file__).resolve().parents[2]

#: The scenarios of `probe_scenarios.py` these tests read, in the order the launch runs them (FSDP2 last: its model
#: loads build device meshes, nothing the others use).
SCENARIOS = (
    "straddle",
    "faults",
    "dynamic",
    "one_rank_faults",
    "gradient-grpo",
    "gradient-bnpo",
    "collective_reward",
    "unscored_on_one_process",
    "tools-feedback",
    "tools-retry",
    "fsdp2",
)


@dataclass
class Launch:
    """How one ``accelerate launch`` ended: its exit status (None: killed at the time limit) and its output."""

    returncode: int | None
    stdout: str
    stderr: str  # without warning lines

    @property
    def clean(self) -> bool:
        return self.returncode == 0 and "Traceback" not in self.stderr

    def report(self) -> str:
        return f"exit {self.returncode}\n{self.stdout[-2000:]}\n{self.stderr[-6000:]}"


def _run_launch(tmp_path: Path, *probe_args: str, probe: str, timeout: float) -> Launch:
    """Run ``probe`` (in this folder) on two processes with ``tmp_path`` and ``probe_args``; past ``timeout`` seconds
    the launcher and both processes are killed."""
    accelerate = executable("accelerate")
    # ROOT for `tests.*`, ahead of the inherited path, which keeps the processes on the code this test imports.
    python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": python_path, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "true"}
    command = [
        accelerate, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision",
        "no", "--dynamo_backend", "no", "--main_process_port", "0",
        str(ROOT / "tests" / "distributed" / probe), str(tmp_path), *probe_args,
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
        returncode: int | None = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the launcher and the processes it started
        stdout, stderr = process.communicate()
        returncode = None
        stderr += f"\nkilled after {timeout} s"
    noise = ("Warning:", "warnings.warn(")
    stderr = "\n".join(line for line in stderr.splitlines() if not any(n in line for n in noise))
    return Launch(returncode, stdout, stderr)


def _launch(tmp_path: Path, *probe_args: str, probe: str = "probe_train.py") -> list[dict]:
    """Run ``probe`` (in this folder) on two processes with ``tmp_path`` and ``probe_args``; return each rank's JSON
    (the probe writes ``tmp_path``/rank<r>.json). The run must exit 0 without a traceback (a clean end, see
    `maxent_grpo.cli.commands.train.end_training`)."""
    launch = _run_launch(tmp_path, *probe_args, probe=probe, timeout=600)
    assert launch.returncode == 0, launch.report()
    assert "Traceback" not in launch.stderr, launch.stderr[-6000:]
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]


def launch_server_variants(
    folder: Path, model_dir: str, base_url: str, variants: tuple[str, ...]
) -> dict[str, list[dict[str, Any]]]:
    """`probe_server.py`'s ``variants`` in one launch against the vLLM server at ``base_url`` (the vllm and deepspeed
    tiers' tests); per variant, both processes' records. The launch must end cleanly (exit 0, no traceback)."""
    launch = _run_launch(folder, model_dir, base_url, *variants, probe="probe_server.py", timeout=600 * len(variants))
    assert launch.clean, launch.report()
    ranks = [f"rank{r}.json" for r in (0, 1)]
    return {variant: [json.loads((folder / variant / name).read_text()) for name in ranks] for variant in variants}


def _read_statuses(folder: Path) -> list[dict[str, Any] | None]:
    """Each process's file for the scenario in ``folder`` (None where the scenario never started there)."""
    paths = [folder / f"rank{r}.json" for r in (0, 1)]
    return [json.loads(path.read_text()) if path.exists() else None for path in paths]


def run_scenarios(folder: Path, model_dir: str, names: tuple[str, ...]) -> dict[str, list[dict[str, Any]] | str]:
    """Run ``names`` in one launch of `probe_scenarios.py`; return per scenario both processes' records, or why it
    failed. A scenario that raised (or hung, or crashed its process) ends its launch: the scenarios after it run in a
    new launch. A launch that fails while every scenario in it succeeded (at teardown) fails all of them."""
    outcomes: dict[str, list[dict[str, Any]] | str] = {}
    pending = list(names)
    attempt = 0
    while pending:
        base = folder / f"launch{attempt}"
        launch = _run_launch(base, model_dir, *pending, probe="probe_scenarios.py", timeout=600 * len(pending) + 300)
        succeeded: list[str] = []
        for name in pending:
            statuses = _read_statuses(base / name)
            if all(s is not None and s["status"] == "ok" for s in statuses):
                succeeded.append(name)
                continue
            if all(s is None for s in statuses):
                break  # not started: the launch ended before it
            errors = [s["traceback"] for s in statuses if s is not None and s["status"] == "error"]
            outcomes[name] = "\n".join(errors) if errors else f"scenario {name!r} did not finish\n{launch.report()}"
            break
        failed_here = any(name in outcomes for name in pending)
        if not failed_here and not (launch.clean and succeeded == pending):
            # No scenario failed, yet the launch did not end cleanly or did not run them all: teardown, or a crash
            # outside the scenarios. Fail every scenario it was to run, as separate launches would have, and stop.
            for name in pending:
                outcomes[name] = f"the launch running scenarios {pending} did not end cleanly\n{launch.report()}"
            return outcomes
        for name in succeeded:
            outcomes[name] = [status["record"] for status in _read_statuses(base / name)]  # type: ignore[index]
        pending = [name for name in pending if name not in outcomes]
        attempt += 1
    return outcomes


@pytest.fixture(scope="module")
def scenario_results(tmp_path_factory, tiny_model_dir) -> dict[str, list[dict[str, Any]] | str]:
    """Every scenario of `SCENARIOS`, run in one launch (more only after a scenario failed)."""
    return run_scenarios(tmp_path_factory.mktemp("scenarios"), str(tiny_model_dir), SCENARIOS)


@pytest.fixture
def ranks_of(scenario_results):
    """``ranks_of(name)``: both processes' records of scenario ``name``; fails the test with why the scenario did."""

    def ranks(name: str) -> list[dict[str, Any]]:
        outcome = scenario_results[name]
        if isinstance(outcome, str):
            pytest.fail(outcome, pytrace=False)
        return outcome

    return ranks


def _assert_same_backend_calls(rank0: dict, rank1: dict) -> None:
    """I7: per generation batch, both processes called the backend equally often (ZeRO-3 / FSDP would hang else)."""
    calls0 = [record["backend_calls"] for record in rank0["records"]]
    calls1 = [record["backend_calls"] for record in rank1["records"]]
    assert calls0 == calls1


def test_straddling_group_dropped_on_both_processes(ranks_of):
    rank0, rank1 = ranks_of("straddle")
    assert [r["world_size"] for r in (rank0, rank1)] == [2, 2]
    assert len(rank0["records"]) == len(rank1["records"]) == 4
    for record0, record1 in zip(rank0["records"], rank1["records"], strict=True):
        assert record0["global_keep"] == record1["global_keep"]
        # Rows 0-3: group 0 (process 0 only); rows 4-7: the straddling group; rows 8-11: group 2 (process 1 only).
        assert record0["global_keep"] == [True] * 4 + [False] * 4 + [True] * 4
        # Process 0 received its half of the straddling group complete, and still dropped it.
        assert record0["keep"] == [True] * 4 + [False] * 2
        assert record1["keep"] == [False] * 2 + [True] * 4
        assert record0["prompts"][4] == record1["prompts"][0]  # the same prompt on both sides
    assert rank0["rows_seen"] == rank1["rows_seen"] == 4 * 4  # one whole group per process per step
    assert [e["generation/dropped_prompts"] for e in rank0["logs"] if "generation/dropped_prompts" in e] == [1.0] * 4
    assert rank0["checksum"] == pytest.approx(rank1["checksum"], abs=1e-9)  # DDP kept the replicas equal


def test_random_faults_listwise_two_processes(ranks_of):
    rank0, rank1 = ranks_of("faults")
    for record0, record1 in zip(rank0["records"], rank1["records"], strict=True):
        assert record0["global_keep"] == record1["global_keep"]
        assert record0["keep"] == record0["global_keep"][:6] and record1["keep"] == record1["global_keep"][6:]
        for start in range(0, 12, 4):
            assert len(set(record0["global_keep"][start : start + 4])) == 1
    assert rank0["finite_params"] and rank1["finite_params"]
    assert rank0["checksum"] == pytest.approx(rank1["checksum"], abs=1e-9)
    _assert_same_backend_calls(rank0, rank1)
    logs = [e for e in rank0["logs"] if "generation/retried_prompts" in e]
    assert sum(e["generation/retried_prompts"] for e in logs) > 0
    assert all("maxent/tau" in e for e in logs)
    # Both processes weighed every group alike (policy mode probabilities from the gathered batch): each group's
    # advantages, the straddling group's halves included, sum to zero; dropped rows have none.
    batches = list(zip(rank0["advantages"], rank1["advantages"], rank0["records"], strict=True))
    for local0, local1, record in batches:
        advantages = local0 + local1
        assert all(a == 0 for a, kept in zip(advantages, record["global_keep"], strict=True) if not kept)
        for start in range(0, 12, 4):
            assert sum(advantages[start : start + 4]) == pytest.approx(0.0, abs=1e-5)
    assert any(abs(a) > 1e-3 for local0, local1, _ in batches for a in local0 + local1)


def test_dynamic_sampling_two_processes(ranks_of):
    rank0, rank1 = ranks_of("dynamic")
    for record0, record1 in zip(rank0["records"], rank1["records"], strict=True):
        assert record0["global_keep"] == record1["global_keep"]
        prompts = record0["prompts"] + record1["prompts"]
        for start in range(0, 12, 4):
            group = prompts[start : start + 4]
            assert len(set(group)) == 1  # a refilled group is one prompt, also when it straddles the processes
            if all(record0["global_keep"][start : start + 4]):
                assert int(group[0][1:-1]) % 2 == 1  # every kept group has signal: constant prompts were replaced
    logs = [e for e in rank0["logs"] if "dynamic_sampling/rounds" in e]
    assert len(logs) == 4 and sum(e["dynamic_sampling/filtered_groups"] for e in logs) > 0
    assert rank0["checksum"] == pytest.approx(rank1["checksum"], abs=1e-9)
    _assert_same_backend_calls(rank0, rank1)


def test_faults_on_one_process_keep_the_calls_symmetric(ranks_of):
    rank0, rank1 = ranks_of("one_rank_faults")
    _assert_same_backend_calls(rank0, rank1)
    calls = [record["backend_calls"] for record in rank0["records"]]
    assert len(calls) == 8 and max(calls) > 1  # retries and refills happened, on both processes alike
    for record0, record1 in zip(rank0["records"], rank1["records"], strict=True):
        assert record0["global_keep"] == record1["global_keep"]
    assert rank0["checksum"] == pytest.approx(rank1["checksum"], abs=1e-9)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo"])
def test_a_process_without_kept_rows_does_not_shrink_the_gradient(ranks_of, loss_type):
    rank0, rank1 = ranks_of(f"gradient-{loss_type}")
    assert (rank0["kept"], rank1["kept"]) == (8, 0)
    assert rank0["relative_error"] <= 1e-6, rank0  # not half of it, as a zero from process 1 would make it


@pytest.fixture
def fsdp2_runs(ranks_of) -> list[dict]:
    return [rank["runs"] for rank in ranks_of("fsdp2")]


def test_fsdp2_step_without_kept_rows_changes_no_weight_and_no_optimizer_state(fsdp2_runs):
    """I4 / I6 under FSDP2 (sharded at load time): an all-dropped step leaves each process's shards bit-identical."""
    for runs in fsdp2_runs:
        after_one = runs["empty"][0]
        assert after_one["sharded_parameters"] == after_one["num_parameters"]  # every parameter is a DTensor
    assert_empty_step_left_no_trace(fsdp2_runs)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_fsdp2_process_without_kept_rows_leaves_stock_trls_update(fsdp2_runs, optimizer, loss_type):
    """I6 under FSDP2: process 1 drops all its groups; the update is stock TRL's on process 0's rows alone."""
    assert_stock_update(fsdp2_runs, optimizer, loss_type)


def test_a_process_without_kept_rows_still_calls_a_collective_reward_function(ranks_of):
    # Every process calls every reward function at every scoring, with no rows where it kept none: a judge sharded
    # across processes (an all_reduce here) neither hangs nor mis-scores when process 1 dropped all its groups.
    rank0, rank1 = ranks_of("collective_reward")
    assert [call["rows"] for call in rank0["calls"]] == [8, 8]
    assert rank1["calls"] == [{"rows": 0, "answer": [], "completion_ids": [], "all": 8}] * 2
    assert all(call["all"] == 8 for call in rank0["calls"])
    for batch in rank0["batches"]:
        assert batch["global_keep"] == [True] * 8 + [False] * 8
        for reward, text in zip(batch["rewards"][:8], batch["texts"], strict=True):
            assert reward == pytest.approx(int(text[-1]) + 0.08)
        assert all(reward != reward for reward in batch["rewards"][8:])  # dropped rows are unscorable (NaN)


def test_rows_a_reward_function_could_not_score_on_one_process_leave_the_update_on_both(ranks_of):
    # Scoring fails on process 1 only: both processes leave the same rows out (I3 / I7), the straddling group keeps
    # its two scored rows with their own baseline, no unscored row gets a reward or an advantage, and the gradient is
    # stock TRL's on process 0's rows alone (I6).
    rank0, rank1 = ranks_of("unscored_on_one_process")
    assert (rank0["calls"], rank1["calls"]) == (1, 2)  # process 1's call was retried once, then left unscored
    (batch0,) = rank0["batches"]
    (batch1,) = rank1["batches"]
    assert batch0["global_keep"] == batch1["global_keep"] == [True] * 6 + [False] * 6
    assert batch0["keep"] == [True] * 6 and batch1["keep"] == [False] * 6
    assert batch0["rewards"] == batch1["rewards"]
    rewards = batch0["rewards"]
    assert all(r is not None for r in rewards[:6]) and all(r is None for r in rewards[6:])  # never a made-up 0
    scored = torch.tensor(rewards[4:6])  # the straddling group's baseline is over its scored rows only
    expected = (scored - scored.mean()) / (scored.std() + 1e-4)
    assert batch0["advantages"][4:6] == pytest.approx(expected.tolist(), abs=1e-5)
    assert batch1["advantages"] == [0.0] * 6
    assert rank0["logs"][0] == rank1["logs"][0]
    assert rank0["logs"][0]["scoring/unscored_rows"] == 6.0
    assert rank0["logs"][0]["scoring/remote_digit/failed"] == 1.0
    assert rank0["logs"][0]["scoring/remote_digit/retried"] == 1.0
    assert rank0["relative_error"] <= 1e-6, rank0


@pytest.mark.parametrize("policy", ["feedback", "retry"])
def test_tool_faults_on_one_process_keep_both_in_step(ranks_of, policy):
    """Episodes whose tool hangs or raises (mostly on process 0) are retried or dropped alike on both processes: the
    same backend calls, the same keep table, rows aligned (the reward checks), replicas equal."""
    rank0, rank1 = ranks_of(f"tools-{policy}")
    _assert_same_backend_calls(rank0, rank1)
    for record0, record1 in zip(rank0["records"], rank1["records"], strict=True):
        assert record0["global_keep"] == record1["global_keep"]
        assert record0["keep"] == record0["global_keep"][:6] and record1["keep"] == record1["global_keep"][6:]
    assert rank0["logs"][:-1] == rank1["logs"][:-1]  # the same (summed) metrics on both processes
    steps = [entry for entry in rank0["logs"] if "tools/failed_episodes" in entry]
    assert sum(entry["tools/failed_episodes"] for entry in steps) > 0
    assert sum(entry["generation/retried_prompts"] for entry in steps) > 0
    if policy == "feedback":
        assert any(entry.get("tools/failure_frequency", 0) > 0 for entry in steps)
    assert rank0["finite_params"] and rank0["checksum"] == pytest.approx(rank1["checksum"], abs=1e-9)
