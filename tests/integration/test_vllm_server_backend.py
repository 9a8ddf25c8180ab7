"""`VLLMServerBackend` against a real server process (tests/support/stand_in_vllm/server.py), one per fault setting."""

from __future__ import annotations

import dataclasses
import logging
import math
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from maxent_grpo.collectives import Collectives
from maxent_grpo.training.generation.backends.vllm_server import VLLMServerBackend
from maxent_grpo.training.generation.backends.vllm_server_pool import VLLMServerPool
from maxent_grpo.training.generation.collect import collect_completion_groups
from maxent_grpo.training.generation.contract.protocol import Completion
from maxent_grpo.training.generation.contract.sampling import SamplingSettings
from maxent_grpo.training.generation.server_client.transport import (
    VLLMServerRequestError,
    VLLMServerUnavailableError,
)
from maxent_grpo.training.generation.step import GenerationStep
from tests.support.stand_in_vllm.process import run_test_servers

LOGGER = "maxent_grpo.training.generation.backends.vllm_server"
MAX_TOKENS = 6

# Fault injection is drawn per request from --seed and the request's arrival number; tests that depend on which
# requests fail send them one at a time (max_concurrency=1). Seed 0 with a 50 % failure rate and two attempts loses
# some prompts, keeps others, and shows both an HTTP 500 and a dropped connection.
SERVERS = {
    "clean": (),
    "failing": ("--failure-rate", "0.5", "--seed", "0"),
    "down": ("--failure-rate", "1.0"),  # answers its health check, fails every completion request
    "short": ("--short-rate", "1.0"),
    "slow": ("--delay-rate", "1.0", "--delay-seconds", "30"),
    "oov": ("--oov-rate", "0.5", "--seed", "0"),
    "short_context": ("--max-model-len", "16"),
    "trickle": ("--trickle-rate", "1.0", "--trickle-seconds", "0.02"),
    "trickle_headers": ("--trickle-rate", "1.0", "--trickle-seconds", "0.1", "--trickle-headers"),
    "logprobs": ("--null-logprobs-rate", "0.3", "--nan-logprobs-rate", "0.3", "--seed", "0"),
    "corrupt_gzip": ("--corrupt-gzip-rate", "0.5", "--seed", "0"),
}


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir: Path) -> Path:
    return tiny_model_dir


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(model_dir)


@pytest.fixture(scope="module")
def servers(model_dir: Path) -> Iterator[dict[str, str]]:
    with run_test_servers(SERVERS, model_dir=model_dir) as urls:
        yield urls


@pytest.fixture
def backend_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger=LOGGER)
    return caplog


SAMPLING_FIELDS = {field.name for field in dataclasses.fields(SamplingSettings)}


def make_backend(url: str, tokenizer: PreTrainedTokenizerBase, **overrides: object) -> VLLMServerBackend:
    """A backend on ``url``; ``overrides`` are backend arguments and `SamplingSettings` fields alike."""
    sampling: dict = {"max_tokens": MAX_TOKENS} | {k: v for k, v in overrides.items() if k in SAMPLING_FIELDS}
    settings: dict = {"backoff_seconds": 0.01, "request_timeout": 20.0, "connection_timeout": 10.0}
    settings |= {k: v for k, v in overrides.items() if k not in SAMPLING_FIELDS}
    return VLLMServerBackend(url, tokenizer=tokenizer, sampling=SamplingSettings(**sampling), **settings)


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == LOGGER]


def check_completion(completion: Completion, tokenizer: PreTrainedTokenizerBase, prompt_ids: list[int]) -> None:
    vocab_size = len(tokenizer)
    assert not completion.failed
    assert completion.prompt_ids == prompt_ids
    assert 1 <= len(completion.completion_ids) <= MAX_TOKENS
    assert all(0 <= t < vocab_size for t in completion.completion_ids)
    assert tokenizer.eos_token_id not in completion.completion_ids[:-1]
    assert completion.logprobs is not None
    assert len(completion.logprobs) == len(completion.completion_ids)
    assert all(math.isfinite(lp) and lp <= 0 for lp in completion.logprobs)
    assert completion.text == tokenizer.decode(completion.completion_ids, skip_special_tokens=True)


@pytest.fixture
def refusing_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses connections: bound, never listening, and held so nothing else can take it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


# ------------------------------------------------------------------------------------------------------ no faults


def test_fault_free_groups_have_the_asked_sizes_and_consistent_tokens(servers, tokenizer, backend_logs):
    backend = make_backend(servers["clean"], tokenizer)
    prompts = ["ab", "hello", "xyz", "q"]
    counts = [3, 0, 2, 1]

    groups = backend.generate(prompts, counts)

    assert [len(group) for group in groups] == counts
    for prompt, group in zip(prompts, groups, strict=True):
        for completion in group:
            check_completion(completion, tokenizer, tokenizer(prompt)["input_ids"])
    assert backend.stats == {
        "requests": 3,
        "retries": 0,
        "infrastructure_failures": 0,
        "timeouts": 0,
        "bad_data": 0,
        "out_of_time": 0,
        "weight_pushes": 0,
        "weight_resyncs": 0,
        "weight_refusals": 0,
        "stale_completions": 0,
        "weight_write_seconds": 0.0,
        "weight_reload_seconds": 0.0,
    }
    assert not any("failure" in m or "bad data" in m for m in messages(backend_logs))


def test_logprobs_are_those_of_the_sampled_tokens(servers, tokenizer, model_dir):
    # With logprobs=3 each position carries the top 3 tokens besides the sampled one, sorted by probability: the
    # sampled token's entry must be picked, not the first. Recomputing under the model checks both.
    backend = make_backend(servers["clean"], tokenizer, generation_kwargs={"logprobs": 3})
    prompt_ids = tokenizer("hello")["input_ids"]
    group = backend.generate(["hello"], [4])[0]

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    assert len(group) == 4
    for completion in group:
        check_completion(completion, tokenizer, prompt_ids)
        ids = torch.tensor([prompt_ids + completion.completion_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(prompt_ids) - 1 : -1]
        expected = logits.log_softmax(-1).gather(-1, torch.tensor(completion.completion_ids)[:, None]).squeeze(-1)
        torch.testing.assert_close(torch.tensor(completion.logprobs), expected, atol=1e-4, rtol=1e-4)


def test_chat_prompt_goes_through_the_chat_template(servers, tokenizer):
    backend = make_backend(servers["clean"], tokenizer)
    chat = [{"role": "user", "content": "hi"}]

    group = backend.generate([chat], [2])[0]

    assert len(group) == 2
    for completion in group:
        check_completion(completion, tokenizer, tokenizer("user: hi\nassistant: ")["input_ids"])


def test_unknown_model_is_a_configuration_error_and_not_retried(servers, tokenizer):
    backend = make_backend(servers["clean"], tokenizer, generation_kwargs={"model": "no-such-model"})

    with pytest.raises(VLLMServerRequestError, match="HTTP 404") as raised:
        backend.generate(["ab"], [2])

    assert raised.value.status_code == 404
    assert "configuration error" in str(raised.value)
    assert backend.stats["requests"] == 1


def test_structured_outputs_regex_constrains_the_completions(servers, tokenizer):
    backend = make_backend(servers["clean"], tokenizer, structured_outputs_regex="[ab]*")
    prompts = ["hello", "xyz"]

    groups = backend.generate(prompts, [4, 4])

    assert [len(group) for group in groups] == [4, 4]
    for prompt, group in zip(prompts, groups, strict=True):
        for completion in group:
            check_completion(completion, tokenizer, tokenizer(prompt)["input_ids"])
            assert re.fullmatch("[ab]*", completion.text), completion.text
    assert any(completion.text for group in groups for completion in group)


def test_structured_outputs_in_generation_kwargs_override_the_regex_as_in_trl(servers, tokenizer):
    backend = make_backend(
        servers["clean"],
        tokenizer,
        structured_outputs_regex="[ab]*",
        generation_kwargs={"structured_outputs": {"regex": "[cd]*"}},
    )

    group = backend.generate(["hello"], [4])[0]

    assert len(group) == 4 and all(re.fullmatch("[cd]*", completion.text) for completion in group)


# ------------------------------------------------------------------------------------------------------ faults


def _lost_groups(backend: VLLMServerBackend, prompts: list[str], tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Ask for two completions per prompt; some prompts, not all, come back empty, the others whole and correct."""
    groups = backend.generate(prompts, [2] * len(prompts))
    empty = [i for i, group in enumerate(groups) if not group]
    assert 0 < len(empty) < len(prompts)
    for prompt, group in zip(prompts, groups, strict=True):
        assert len(group) in (0, 2)
        for completion in group:
            check_completion(completion, tokenizer, tokenizer(prompt)["input_ids"])
    return empty


def test_infrastructure_failures_are_retried_and_partial_results_kept(servers, tokenizer, backend_logs):
    backend = make_backend(servers["failing"], tokenizer, max_attempts=2, max_concurrency=1)
    prompts = [f"prompt {i}" for i in range(12)]

    empty = _lost_groups(backend, prompts, tokenizer)
    stats = backend.stats
    assert stats["infrastructure_failures"] == len(empty)
    assert stats["retries"] > 0
    assert stats["requests"] == len(prompts) + stats["retries"]
    assert stats["bad_data"] == 0
    logged = messages(backend_logs)
    failures = [m for m in logged if m.startswith("infrastructure failure")]
    assert len(failures) == len(empty)
    assert all("/v1/completions" in m and "after 2 attempt(s)" in m for m in failures)
    assert any("HTTP 500" in m for m in logged)
    assert any("ConnectionError" in m for m in logged)


def test_a_body_that_cannot_be_decoded_is_an_infrastructure_failure_and_the_other_groups_are_kept(
    servers, tokenizer, backend_logs
):
    # A corrupt content encoding (gzip that is not) broke the transfer, not the data: retried like a dropped
    # connection, and a prompt that never gets a readable answer loses only its own group.
    backend = make_backend(servers["corrupt_gzip"], tokenizer, max_attempts=2, max_concurrency=1)
    prompts = [f"prompt {i}" for i in range(12)]

    empty = _lost_groups(backend, prompts, tokenizer)
    stats = backend.stats
    assert stats["infrastructure_failures"] == len(empty)
    assert stats["retries"] > 0 and stats["requests"] == len(prompts) + stats["retries"]
    assert stats["bad_data"] == 0
    failures = [m for m in messages(backend_logs) if m.startswith("infrastructure failure")]
    assert len(failures) == len(empty) and all("DecodeError" in m for m in failures)


def test_short_groups_are_returned_as_is_and_logged_as_bad_data(servers, tokenizer, backend_logs):
    backend = make_backend(servers["short"], tokenizer)

    groups = backend.generate(["ab", "cd"], [4, 3])

    assert len(groups[0]) < 4 and len(groups[1]) < 3
    for prompt, group in zip(["ab", "cd"], groups, strict=True):
        for completion in group:
            check_completion(completion, tokenizer, tokenizer(prompt)["input_ids"])
    assert backend.stats["requests"] == 2  # not retried by the backend
    assert backend.stats["bad_data"] == 2
    assert backend.stats["infrastructure_failures"] == 0
    shorts = [m for m in messages(backend_logs) if m.startswith("bad data") and "short group: got" in m]
    assert len(shorts) == 2


def test_a_prompt_the_server_rejects_leaves_only_its_own_group_empty(servers, tokenizer, backend_logs):
    # 16 tokens of context: 6 completion tokens leave room for "ab" and "cd", not for the long prompt.
    backend = make_backend(servers["short_context"], tokenizer)
    prompts = ["ab", "a prompt longer than the context", "cd"]

    groups = backend.generate(prompts, [2, 3, 2])

    assert [len(group) for group in groups] == [2, 0, 2]
    for prompt, group in zip(prompts, groups, strict=True):
        for completion in group:
            check_completion(completion, tokenizer, tokenizer(prompt)["input_ids"])
    assert backend.stats == {
        "requests": 3,
        "retries": 0,
        "infrastructure_failures": 0,
        "timeouts": 0,
        "bad_data": 1,
        "out_of_time": 0,
        "weight_pushes": 0,
        "weight_resyncs": 0,
        "weight_refusals": 0,
        "stale_completions": 0,
        "weight_write_seconds": 0.0,
        "weight_reload_seconds": 0.0,
    }
    logged = messages(backend_logs)
    (rejected,) = [m for m in logged if m.startswith("bad data")]
    assert "HTTP 400" in rejected and "maximum context length" in rejected and "not sent again" in rejected
    assert not any("retrying" in m or "failure" in m for m in logged)

    # Through the trainer's retry rounds: the rejected prompt stays short and is never sent again (it is bad data),
    # the others are complete: two requests for them, none for it, in the first call and both retry rounds.
    collected = collect_completion_groups(backend, prompts, [2, 3, 2], retry_limit=2, check=lambda completion: None)
    assert collected.complete == [True, False, True]
    assert collected.stats["backend_errors"] == 0 and collected.stats["retry_rounds"] == 2
    assert backend.stats["requests"] == 3 + 2 and backend.stats["bad_data"] == 1


def test_delays_beyond_the_request_timeout_do_not_hang(servers, tokenizer, backend_logs):
    backend = make_backend(servers["slow"], tokenizer, request_timeout=0.5, max_attempts=2)

    start = time.monotonic()
    groups = backend.generate(["ab", "cd"], [2, 2])
    elapsed = time.monotonic() - start

    assert groups == [[], []]
    assert elapsed < 10  # 2 attempts of 0.5 s each, side by side; the server would answer after 30 s
    assert backend.stats["infrastructure_failures"] == 2 and backend.stats["timeouts"] == 2  # it hangs
    assert backend.stats["requests"] == 4
    failures = [m for m in messages(backend_logs) if m.startswith("infrastructure failure")]
    assert len(failures) == 2
    assert all("Timeout" in m for m in failures)


@pytest.mark.parametrize("server", ["trickle", "trickle_headers"])
def test_an_answer_trickled_byte_by_byte_is_cut_off_at_the_request_timeout(server, servers, tokenizer, backend_logs):
    backend = make_backend(servers[server], tokenizer, request_timeout=1.0, max_attempts=1)

    start = time.monotonic()
    groups = backend.generate(["ab"], [2])
    elapsed = time.monotonic() - start

    assert groups == [[]]
    assert elapsed < 3 * 1.0 + 2  # a bound, not a benchmark: the whole answer (or its headers alone) takes over 7 s
    assert backend.stats["infrastructure_failures"] == 1
    (failure,) = [m for m in messages(backend_logs) if m.startswith("infrastructure failure")]
    assert "Timeout" in failure


@pytest.mark.parametrize("server", ["slow", "trickle"])
def test_requests_in_flight_are_cut_off_at_once_when_cancelled(server, servers, tokenizer):
    """Training that stops (Ctrl-C, an exception) with a call in flight on another thread: `cancel_requests` ends the
    call's requests at once, waiting for the answer's headers or in the middle of its body, and none is tried again
    once the deadline has passed."""
    backend = make_backend(servers[server], tokenizer, request_timeout=60.0, max_attempts=3)
    result: list = []
    worker = threading.Thread(target=lambda: result.append(backend.generate(["ab", "cd"], [2, 2])), daemon=True)
    worker.start()
    time.sleep(1.0)  # the requests are waiting on the server
    start = time.monotonic()
    backend.set_deadline(time.monotonic())
    backend.cancel_requests()
    worker.join(timeout=10)
    elapsed = time.monotonic() - start

    assert not worker.is_alive() and result == [[[], []]]
    assert elapsed < 5  # a bound, not a benchmark: the server would take 30 s (slow) or over 7 s (trickle)
    assert backend.stats["requests"] == 2  # no new try after the cut


def test_a_generation_step_with_a_time_budget_ends_within_it_and_drops_what_is_missing(
    servers, tokenizer, backend_logs
):
    # Each request would take 30 s, and up to 3 attempts in each of 1 + G rounds: the budget cuts all of it short.
    backend = make_backend(servers["slow"], tokenizer, request_timeout=20.0, max_attempts=3)
    step = GenerationStep(
        backend,
        check=lambda completion: None,
        collectives=Collectives(process_index=0, device=torch.device("cpu"), gather=lambda tensor: tensor),
        group_size=2,
        max_retry_rounds=None,
        placeholder_prompt_id=0,
        placeholder_completion_id=1,
        step_timeout=1.5,
    )

    start = time.monotonic()
    batch = step.collect(["ab", "ab", "cd", "cd"])
    agreement = step.agree(batch)
    elapsed = time.monotonic() - start

    assert elapsed < 1.5 + 2  # a bound, not a benchmark
    assert agreement.group_kept.tolist() == [False, False]
    assert batch.backend_calls == 1 and batch.stats["retry_rounds"] == 0
    assert "the generation step's time budget was spent" in batch.reasons
    assert backend.stats["out_of_time"] == 2 and backend.stats["infrastructure_failures"] == 0
    assert sum(m.startswith("out of time") for m in messages(backend_logs)) == 2


def test_out_of_vocabulary_completions_are_marked_failed(servers, tokenizer, backend_logs):
    backend = make_backend(servers["oov"], tokenizer, max_concurrency=1)
    vocab_size = len(tokenizer)

    groups = backend.generate(["ab", "cd"], [4, 4])

    completions = [completion for group in groups for completion in group]
    assert [len(group) for group in groups] == [4, 4]
    outside = [any(t >= vocab_size for t in c.completion_ids) for c in completions]
    assert [c.failed for c in completions] == outside
    assert any(outside) and not all(outside)
    for completion in completions:
        if completion.failed:
            assert completion.logprobs is None
            assert completion.text  # the server's text, kept as given
    assert backend.stats["bad_data"] == sum(outside)
    assert backend.stats["requests"] == 2
    logged = [m for m in messages(backend_logs) if m.startswith("bad data")]
    assert len(logged) == sum(outside)
    assert all("outside the vocabulary" in m for m in logged)


def test_choices_without_logprobs_are_marked_failed(servers, tokenizer, backend_logs):
    # One completion without logprobs would leave the whole batch without them, and TRL's importance-sampling
    # correction would then subtract None: such a completion is bad data and counts as missing.
    backend = make_backend(servers["logprobs"], tokenizer, max_concurrency=1)

    groups = backend.generate(["ab", "cd"], [8, 8])

    completions = [completion for group in groups for completion in group]
    assert [len(group) for group in groups] == [8, 8]
    failed = [completion for completion in completions if completion.failed]
    assert 0 < len(failed) < len(completions)
    assert all(completion.logprobs is None for completion in failed)
    assert all(completion.logprobs is not None for completion in completions if not completion.failed)
    assert backend.stats["bad_data"] == len(failed)
    logged = [m for m in messages(backend_logs) if m.startswith("bad data")]
    assert len(logged) == len(failed)
    assert all("no logprobs although they were asked for" in m for m in logged)


def test_nan_token_logprobs_are_kept_as_nan(servers, tokenizer):
    backend = make_backend(servers["logprobs"], tokenizer, max_concurrency=1)

    groups = backend.generate(["ab", "cd"], [8, 8])

    kept = [completion for group in groups for completion in group if not completion.failed]
    with_nan = [c for c in kept if any(math.isnan(value) for value in c.logprobs)]
    assert 0 < len(with_nan) < len(kept)
    for completion in with_nan:
        assert len(completion.logprobs) == len(completion.completion_ids)
        assert sum(math.isnan(value) for value in completion.logprobs) == 1
        assert all(value <= 0 for value in completion.logprobs if not math.isnan(value))


def test_logprobs_switched_off_are_not_bad_data(servers, tokenizer):
    backend = make_backend(servers["clean"], tokenizer, generation_kwargs={"logprobs": None})

    group = backend.generate(["ab"], [2])[0]

    assert len(group) == 2
    assert all(not completion.failed and completion.logprobs is None for completion in group)
    assert backend.stats["bad_data"] == 0


def test_server_that_never_comes_up_raises_a_clear_error_once_connection_timeout_has_passed(tokenizer, refusing_port):
    url = f"http://127.0.0.1:{refusing_port}"
    backend = make_backend(url, tokenizer, connection_timeout=1.0, max_attempts=3)

    start = time.monotonic()
    with pytest.raises(VLLMServerUnavailableError, match=rf"{url} has not come up within 1 s .*ConnectionError"):
        backend.generate(["ab", "cd"], [2, 1])
    assert 1.0 <= time.monotonic() - start < 5
    start = time.monotonic()  # the wait is spent: later calls fail at once
    with pytest.raises(VLLMServerUnavailableError):
        backend.generate(["ab"], [1])
    assert time.monotonic() - start < 1
    assert backend.stats["requests"] == 0


# ------------------------------------------------------------------------------------------------------ no server


def test_sync_weights_calls_weight_sync_or_warns_once(tokenizer, backend_logs):
    calls = []
    synced = make_backend("http://127.0.0.1:1", tokenizer, weight_sync=lambda: calls.append(1))
    synced.sync_weights(torch.nn.Linear(1, 1))
    assert calls == [1]

    unsynced = make_backend("http://127.0.0.1:1", tokenizer)
    unsynced.sync_weights(torch.nn.Linear(1, 1))
    unsynced.sync_weights(torch.nn.Linear(1, 1))
    warnings = [r for r in backend_logs.records if r.levelno == logging.WARNING and "off-policy" in r.getMessage()]
    assert len(warnings) == 1


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_tokens", 0),
        ("temperature", 0.0),
        ("top_p", 1.5),
        ("top_k", -2),
        ("min_p", -0.1),
        ("repetition_penalty", 0.0),
        ("request_timeout", 0.0),
        ("max_attempts", 0),
        ("backoff_seconds", -1.0),
        ("max_concurrency", 0),
        ("connection_timeout", float("nan")),
        ("generation_kwargs", {"n": 2}),
        ("structured_outputs_regex", 3),
    ],
)
def test_invalid_settings_are_refused_with_the_field_named(tokenizer, field, value):
    with pytest.raises(ValueError, match=field):
        make_backend("http://127.0.0.1:1", tokenizer, **{field: value})


# ------------------------------------------------------------------------------------------------ a server pool

POOL_LOGGER = "maxent_grpo.training.generation.backends.vllm_server_pool"


def make_pool(urls: list[str], tokenizer: PreTrainedTokenizerBase) -> VLLMServerPool:
    sampling = SamplingSettings(max_tokens=MAX_TOKENS)
    settings = {"backoff_seconds": 0.01, "request_timeout": 20.0, "connection_timeout": 10.0, "max_attempts": 1}
    return VLLMServerPool(urls, tokenizer=tokenizer, sampling=sampling, **settings)


def test_a_pool_spreads_the_groups_and_never_sends_to_a_server_that_is_not_up(servers, tokenizer, refusing_port):
    # Two servers that answer (the second takes prompts of up to 16 tokens: these are shorter) and one that refuses
    # connections.
    urls = [servers["clean"], servers["short_context"], f"http://127.0.0.1:{refusing_port}"]
    pool = make_pool(urls, tokenizer)
    prompts = ["ab", "hello", "xyz", "q", "mn", "rs"]
    counts = [2, 3, 0, 1, 2, 2]

    groups = pool.generate(prompts, counts)

    stats = pool.stats
    # Round robin over the asked prompts (2 asks for none), the first call starting at the second server: 0, 3, 5 to
    # the second server, 1, 4 to the first; none to the server that refuses connections.
    assert [len(group) for group in groups] == counts
    assert (stats["servers/0/requests"], stats["servers/1/requests"], stats["servers/2/requests"]) == (2, 3, 0)
    assert (stats["servers/0/completions"], stats["servers/1/completions"]) == (5, 5)
    assert stats["requests"] == 5 and stats["bad_data"] == 0
    for prompt, group in zip(prompts, groups, strict=True):
        for completion in group:
            check_completion(completion, tokenizer, tokenizer(prompt)["input_ids"])


def test_what_a_failing_server_lost_is_retried_on_the_others_and_it_gets_a_shrinking_share_while_it_fails(
    servers, tokenizer, caplog
):
    caplog.set_level(logging.WARNING, logger=POOL_LOGGER)
    pool = make_pool([servers["clean"], servers["down"]], tokenizer)
    prompts = ["ab", "hello", "xyz", "q"]

    first = pool.generate(prompts, [2, 2, 2, 2])
    assert [len(group) for group in first] == [0, 2, 0, 2]  # server 1 failed its share (prompts 0 and 2)
    missing = [2 - len(group) for group in first]
    retry = pool.generate(prompts, missing)  # the retry round: all to server 0
    assert [len(group) for group in retry] == missing
    after_retry = pool.stats
    assert after_retry["servers/1/requests"] == 2 and after_retry["servers/1/failures"] == 2
    assert after_retry["servers/0/completions"] == 8 and after_retry["servers/1/completions"] == 0

    # Its health check answers and every completion fails (HTTP 500): it is given work in calls 3, 6 and 11
    # (tried after 1, 2, 4, ... calls), never every other call, and each time loses only the groups it was given.
    given, requests_before = [], after_retry["servers/1/requests"]
    for call in range(3, 13):
        groups = pool.generate(prompts, [1, 1, 1, 1])
        requests_now = pool.stats["servers/1/requests"]
        if requests_now > requests_before:
            given.append(call)
            lost = requests_now - requests_before  # one request a group it was given
            assert sorted(len(group) for group in groups) == [0] * lost + [1] * (4 - lost)
        else:
            assert [len(group) for group in groups] == [1, 1, 1, 1]
        requests_before = requests_now
        time.sleep(0.05)
    assert given == [3, 6, 11], given
    assert pool.stats["servers/1/completions"] == 0
    lines = [record.getMessage() for record in caplog.records if record.name == POOL_LOGGER]
    assert sum("vLLM server 1" in line and "marked down (failed)" in line for line in lines) == 1  # logged once


def test_a_pool_with_no_server_up_raises_once_none_came_up(tokenizer, refusing_port):
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        urls = [f"http://127.0.0.1:{refusing_port}", f"http://127.0.0.1:{other.getsockname()[1]}"]
        pool = VLLMServerPool(
            urls, tokenizer=tokenizer, sampling=SamplingSettings(max_tokens=MAX_TOKENS), connection_timeout=0.5
        )
        with pytest.raises(VLLMServerUnavailableError, match=str(refusing_port)):
            pool.generate(["ab"], [2])


@pytest.mark.parametrize(
    ("urls", "match"),
    [
        (["http://127.0.0.1:1"], "at least two"),
        (
            ["http://127.0.0.1:1", "http://localhost:1/"],
            "'http://127.0.0.1:1' and 'http://localhost:1' reach the same",
        ),
    ],
)
def test_a_pool_refuses_fewer_than_two_or_repeated_urls(tokenizer, urls, match):
    with pytest.raises(ValueError, match=match):
        VLLMServerPool(urls, tokenizer=tokenizer, sampling=SamplingSettings(max_tokens=MAX_TOKENS))
