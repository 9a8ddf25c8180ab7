"""Two training processes, each with its pool of stand-in servers, one or two of which hang mid-run: one verdict.

A server that hangs (its ``/health`` and ``/weight_info`` answer, completions and reloads never do) is seen by one
process or the other in the step it starts hanging in; from the next call it is down on both, so from the second step
after the hang every step takes what a healthy one takes, on both processes, and nothing is dropped. It comes back
on both at once, once it answers a canary again. `probe_pool_hang.py` runs the variants in one launch.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.distributed.probe_pool_hang import ANSWER_AFTER, HANG_AFTER, STEPS, VARIANTS
from tests.distributed.test_two_processes import _run_launch
from tests.support.stand_in_vllm.process import run_test_server_processes

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

#: A step is healthy when it takes at most this many times the median healthy step of its process (the issue's
#: bound), plus this many seconds of scheduling noise on a loaded machine: a step that waits on a hung server takes 5 s
#: (a hedge) or the request timeout (8 s), far above either.
STEP_RATIO, STEP_NOISE_SECONDS = 1.2, 0.25


@pytest.fixture(scope="module")
def runs(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[dict[str, Any]]]]:
    folder = tmp_path_factory.mktemp("pool-hang")
    flags = {name: ("--weight-endpoints",) for name in ("a", "b", "c")}
    with run_test_server_processes(flags, model_dir=tiny_model_dir) as started:
        servers = []
        for url, process in started.values():
            model = requests.get(f"{url}/v1/models", timeout=10).json()["data"][0]["id"]
            server = {"url": url, "model": model, "model_dir": str(tiny_model_dir), "stand_in": True}
            servers.append(server | {"pids": [process.pid], "hang": "SIGUSR1", "answer": "SIGUSR1"})
        (folder / "servers.json").write_text(json.dumps(servers))
        launch = _run_launch(folder, str(folder / "servers.json"), *VARIANTS, probe="probe_pool_hang.py", timeout=900)
        assert launch.clean, launch.report()
        yield {
            variant: [json.loads((folder / variant / f"rank{r}.json").read_text()) for r in (0, 1)]
            for variant in VARIANTS
        }


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_hung_server_is_down_on_both_processes_and_costs_no_step_after_the_next(runs, variant):
    assert_one_verdict(runs[variant], variant)


def assert_one_verdict(ranks: list[dict[str, Any]], variant: str, noise: float = STEP_NOISE_SECONDS) -> None:
    """The checks of both processes' records of ``variant`` (`probe_pool_hang.py`): from the second step after the
    hang every step within `STEP_RATIO` times a healthy one plus ``noise`` seconds, nothing dropped, the hung servers
    given nothing while they hung, down on both processes alike and back, with work, after they answered again."""
    _, hanging, is_async = VARIANTS[variant]
    # The first step whose generation meets the hang: the one after it, whose call is made ahead during it with
    # async_generation.
    first = HANG_AFTER + 1 + is_async
    slow = []
    for rank, record in enumerate(ranks):
        seconds = record["seconds"]
        assert len(seconds) == STEPS
        healthy = statistics.median(seconds[1:HANG_AFTER])  # the first step warms up
        print(f"{variant} process {rank}: healthy {healthy:.2f} s; steps {[round(s, 2) for s in seconds]}")
        bound = STEP_RATIO * healthy + noise
        # From the second step after the hang on.
        slow += [(rank, step, took) for step, took in enumerate(seconds, start=1) if step > first and took > bound]
    assert not slow, f"steps over {STEP_RATIO} times a healthy step: {slow}"
    for rank, record in enumerate(ranks):
        assert record["dropped"] == [0.0] * STEPS
        for k in hanging:  # its completions did not grow while it hung
            counted = [completions[k] for completions in record["completions"]]
            assert counted[first - 1] == counted[ANSWER_AFTER - 1], (variant, rank, k, counted)
    # One verdict: before every call both processes had the same servers up; the hanging ones were down for a while,
    # and up, given work again, after they answered again.
    assert ranks[0]["up"] == ranks[1]["up"]
    up = ranks[0]["up"]
    for k in hanging:
        assert not all(state[k] for state in up) and up[-1][k], (variant, k, up)
        assert sum(record["completions"][-1][k] - record["completions"][ANSWER_AFTER - 1][k] for record in ranks) > 0
    assert any(hangs[k] for record in ranks for hangs in record["hangs"][-1:] for k in hanging)
