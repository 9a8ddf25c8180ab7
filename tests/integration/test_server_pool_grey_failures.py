"""Grey failures in a server pool, on stand-in servers (tests/support/stand_in_vllm/server.py): a server that hangs
(its ``/health`` still answers), one that is slow, one that serves another model; and one server that hangs alone.

A server is made to hang by ``SIGUSR1`` (completion requests and reloads wait until the next one, then answer late).
Every wait is bounded, and the bounds are generous: they say "not the request timeout", never how fast.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from maxent_grpo.training.generation.backends.vllm_server import VLLMServerBackend
from maxent_grpo.training.generation.backends.vllm_server_pool import VLLMServerPool
from maxent_grpo.training.generation.contract.sampling import SamplingSettings
from tests.support.real_vllm_server import free_port
from tests.support.stand_in_vllm.process import run_test_server_process, run_test_server_processes

POOL_LOGGER = "maxent_grpo.training.generation.backends.vllm_server_pool"
PROMPTS = ["ab", "hello", "xyz", "q"]
# A bound on one call with a hung server, far below the request timeout the pools below are given (60 s).
CALL_BOUND = 30.0
REQUEST_TIMEOUT = 60.0


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir: Path) -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(tiny_model_dir)


class Switchable:
    """A stand-in server whose hanging is switched by ``SIGUSR1``."""

    def __init__(self, url: str, process: subprocess.Popen[str]) -> None:
        self.url, self.process, self.hanging = url, process, False

    def hang(self, on: bool) -> None:
        if on != self.hanging:
            self.process.send_signal(signal.SIGUSR1)
            self.hanging = on
            time.sleep(0.2)  # the signal is handled between two polls of the server's loop


@pytest.fixture(scope="module")
def servers(tiny_model_dir: Path) -> Iterator[dict[str, Switchable]]:
    flag_sets = {
        "a": ("--weight-endpoints",),
        "b": ("--weight-endpoints",),
        "other": ("--served-model-name", "another-model"),
        "fast": ("--token-seconds", "0.01"),
        "slow": ("--token-seconds", "0.05"),
    }
    with run_test_server_processes(flag_sets, model_dir=tiny_model_dir) as started:
        yield {name: Switchable(url, process) for name, (url, process) in started.items()}


@pytest.fixture
def hung_b(servers: dict[str, Switchable]) -> Iterator[Switchable]:
    """Server ``b``, hanging for the test (and answering again after it)."""
    servers["b"].hang(True)
    yield servers["b"]
    servers["b"].hang(False)


def make_pool(urls: list[str], tokenizer: PreTrainedTokenizerBase, **options: object) -> VLLMServerPool:
    settings: dict = {"backoff_seconds": 0.01, "request_timeout": REQUEST_TIMEOUT, "connection_timeout": 10.0}
    return VLLMServerPool(urls, tokenizer=tokenizer, sampling=SamplingSettings(max_tokens=6), **settings | options)


def timed_call(pool: VLLMServerPool, counts: list[int], budget: float | None = None) -> tuple[list[int], float]:
    pool.set_deadline(None if budget is None else time.monotonic() + budget)
    start = time.monotonic()
    groups = pool.generate(PROMPTS[: len(counts)], counts)
    return [len(group) for group in groups], time.monotonic() - start


def pool_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == POOL_LOGGER]


def returned_completions(pool: VLLMServerPool) -> int:
    return sum(value for key, value in pool.stats.items() if key.endswith("/completions"))


@pytest.mark.parametrize("budget", [None, 8.0], ids=["no deadline", "step deadline"])
def test_a_hung_server_is_marked_down_its_groups_answered_by_the_other_and_it_returns_after_a_canary(
    servers, hung_b, tokenizer, caplog, budget
):
    caplog.set_level(logging.INFO, logger=POOL_LOGGER)
    pool = make_pool([servers["a"].url, hung_b.url], tokenizer)
    asked = 0
    for call in range(4):
        sizes, seconds = timed_call(pool, [2, 2, 2, 2], budget)
        asked += 8
        print(f"call {call}: {sizes} in {seconds:.2f} s")
        assert sizes == [2, 2, 2, 2]  # the hung server's groups were sent again to the other (a hedge)
        assert seconds < CALL_BOUND
    stats = pool.stats
    assert stats["servers/1/hangs"] == 1 and stats["servers/1/hedged"] == 1
    assert stats["servers/1/requests"] == 2  # its share of the first call only: then it was down
    assert stats["servers/1/completions"] == 0 and stats["servers/0/completions"] == asked
    assert stats["out_of_time"] == 0 and stats["infrastructure_failures"] == 0
    down = [line for line in pool_lines(caplog) if line.startswith("vLLM server 1") and "marked down (hung)" in line]
    assert len(down) == 1

    hung_b.hang(False)  # the requests it holds answer now: late, into connections the pool has closed
    came_back = time.monotonic() + 30
    while pool.stats["servers/1/completions"] == 0 and time.monotonic() < came_back:
        sizes, _ = timed_call(pool, [2, 2, 2, 2], budget)
        asked += 8
        assert sizes == [2, 2, 2, 2]
        time.sleep(0.3)
    assert pool.stats["servers/1/completions"] > 0, "the server that answers again was never given work again"
    assert returned_completions(pool) == asked  # the late answers were never counted
    lines = pool_lines(caplog)
    assert sum(line.startswith("vLLM server 1") and "answered a canary" in line for line in lines) == 1
    pool.close()


def test_a_server_hung_in_the_weight_push_is_marked_down_and_gets_the_weights_once_it_answers(
    servers, hung_b, tokenizer, tiny_model_dir, tmp_path
):
    pool = make_pool([servers["a"].url, hung_b.url], tokenizer, weights_directory=tmp_path / "weights")
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    with torch.no_grad():
        next(model.parameters()).add_(0.01)  # weights the servers do not have yet
    pool.sync_weights(model)
    version = pool.weight_version

    sizes, seconds = timed_call(pool, [2, 2, 2, 2], budget=8.0)

    assert sizes == [2, 2, 2, 2] and seconds < CALL_BOUND
    stats = pool.stats
    assert stats["servers/1/hangs"] == 1 and stats["servers/1/completions"] == 0
    assert pool.servers[0].stats["weight_pushes"] == 1 and pool.servers[1].stats["weight_pushes"] == 0
    assert pool.servers[1].disk_weights.served_version(within_step=False) != version

    hung_b.hang(False)
    came_back = time.monotonic() + 30
    while pool.stats["servers/1/completions"] == 0 and time.monotonic() < came_back:
        sizes, _ = timed_call(pool, [2, 2, 2, 2], budget=8.0)
        assert sizes == [2, 2, 2, 2]
        time.sleep(0.3)
    assert pool.stats["servers/1/completions"] > 0
    assert pool.servers[1].stats["weight_pushes"] == 1  # pushed before it generated again
    assert pool.servers[1].disk_weights.served_version(within_step=False) == version
    pool.close()


def test_a_server_that_hangs_while_it_only_loads_the_weights_is_cut_off_and_marked_down(
    servers, hung_b, tokenizer, tiny_model_dir, tmp_path
):
    # A call that asks for nothing (another process's retry round, say) still loads the new version everywhere.
    pool = make_pool([servers["a"].url, hung_b.url], tokenizer, weights_directory=tmp_path / "weights")
    pool.sync_weights(AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32))

    sizes, seconds = timed_call(pool, [0, 0])

    assert sizes == [0, 0] and seconds < CALL_BOUND  # not the request timeout (60 s)
    assert pool.stats["servers/1/hangs"] == 1 and pool.servers[0].stats["weight_pushes"] == 1
    assert timed_call(pool, [2, 2, 2, 2], budget=8.0)[0] == [2, 2, 2, 2]
    assert pool.stats["servers/1/requests"] == 0
    pool.close()


def test_a_slow_server_gets_a_smaller_share(servers, tokenizer):
    pool = make_pool([servers["fast"].url, servers["slow"].url], tokenizer)
    prompts = PROMPTS * 2
    per_call = []
    for _ in range(8):
        before = pool.stats
        groups = pool.generate(prompts, [2] * len(prompts))
        assert [len(group) for group in groups] == [2] * len(prompts)  # nothing lost on the way
        after = pool.stats
        per_call.append(tuple(after[f"servers/{k}/completions"] - before[f"servers/{k}/completions"] for k in (0, 1)))
        time.sleep(0.2)  # the time a trainer trains between two calls
    print("completions per call (fast, slow):", per_call)
    assert per_call[0] == (8, 8) or per_call[0][1] == 0  # equal shares first (the slow one may lose its hedge)
    for fast, slow in per_call[-3:]:  # then the shares follow the measured rates: 5 times slower, far less work
        assert slow <= fast / 2


def test_a_member_serving_another_model_is_left_out_with_one_warning(servers, tokenizer, caplog):
    caplog.set_level(logging.WARNING, logger=POOL_LOGGER)
    pool = make_pool([servers["a"].url, servers["other"].url], tokenizer)
    for _ in range(3):
        sizes, _ = timed_call(pool, [2, 2, 2, 2])
        assert sizes == [2, 2, 2, 2]
    assert pool.stats["servers/1/requests"] == 0
    (warning,) = [line for line in pool_lines(caplog) if line.startswith("vLLM server 1")]
    assert "wrong model" in warning and "'another-model'" in warning and pool.servers[0].served_model in warning


def test_a_member_restarted_with_another_model_is_left_out_until_it_serves_the_right_one_again(
    servers, tokenizer, tiny_model_dir, caplog
):
    caplog.set_level(logging.WARNING, logger=POOL_LOGGER)
    port = free_port()
    with run_test_server_process("--port", str(port), model_dir=tiny_model_dir) as (url, _):
        pool = make_pool([servers["a"].url, url], tokenizer)
        assert timed_call(pool, [2, 2, 2, 2])[0] == [2, 2, 2, 2]
        assert pool.stats["servers/1/completions"] > 0
    name = "--served-model-name"
    with run_test_server_process("--port", str(port), name, "another-model", model_dir=tiny_model_dir):
        timed_call(pool, [2, 2, 2, 2])  # its share of this call is lost (its 404 tells): the trainer retries it
        for _ in range(3):
            assert timed_call(pool, [2, 2, 2, 2])[0] == [2, 2, 2, 2]  # the other member answers for it
            time.sleep(0.3)
        served = pool.stats["servers/1/completions"]
    warnings = [line for line in pool_lines(caplog) if "wrong model" in line]
    assert len(warnings) == 1 and "'another-model'" in warnings[0]
    with run_test_server_process("--port", str(port), model_dir=tiny_model_dir):
        came_back = time.monotonic() + 30
        while pool.stats["servers/1/completions"] == served and time.monotonic() < came_back:
            assert timed_call(pool, [2, 2, 2, 2])[0] == [2, 2, 2, 2]
            time.sleep(0.3)
        assert pool.stats["servers/1/completions"] > served
    pool.close()


def test_a_single_hung_server_costs_one_request_timeout_then_a_canary_per_call(servers, hung_b, tokenizer):
    backend = VLLMServerBackend(
        hung_b.url,
        tokenizer=tokenizer,
        sampling=SamplingSettings(max_tokens=6),
        request_timeout=1.0,
        max_attempts=1,
        connection_timeout=10.0,
    )
    start = time.monotonic()
    assert backend.generate(PROMPTS, [2] * 4) == [[]] * 4
    assert backend.stats["timeouts"] == 4 and time.monotonic() - start < CALL_BOUND
    start = time.monotonic()
    assert backend.generate(PROMPTS, [2] * 4) == [[]] * 4  # a canary first, not answered: nothing sent
    assert backend.stats["requests"] == 4 and time.monotonic() - start < CALL_BOUND
    hung_b.hang(False)
    groups = backend.generate(PROMPTS, [2] * 4)  # the canary is answered: it generates again
    assert [len(group) for group in groups] == [2] * 4
    backend.close()


def test_a_call_made_ahead_while_a_server_hangs_ends_and_the_version_staged_meanwhile_is_served_next(
    servers, hung_b, tokenizer, tiny_model_dir, tmp_path
):
    """`async_generation`'s call ahead: the call runs on another thread while the next version is staged, and is
    published once it is back. A server that hangs during it costs no group, and the next call serves the new
    version."""
    pool = make_pool([servers["a"].url, hung_b.url], tokenizer, weights_directory=tmp_path / "weights")
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    pool.sync_weights(model)
    with ThreadPoolExecutor(max_workers=1) as thread:
        ahead = thread.submit(pool.generate, PROMPTS, [2] * 4)
        with torch.no_grad():
            next(model.parameters()).add_(0.01)
        pool.stage_weights(model)  # the next version, written while the call is in flight
        groups = ahead.result(timeout=CALL_BOUND)
    pool.publish_staged_weights()

    assert [len(group) for group in groups] == [2] * 4
    assert pool.stats["servers/1/hangs"] == 1
    assert {completion.weight_version for group in groups for completion in group} == {"1-" + pool.weight_version[2:]}
    sizes, seconds = timed_call(pool, [2] * 4, budget=8.0)
    assert sizes == [2] * 4 and seconds < CALL_BOUND
    assert pool.servers[0].disk_weights.served_version(within_step=False) == pool.weight_version
    pool.close()
