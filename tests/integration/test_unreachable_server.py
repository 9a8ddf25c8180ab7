"""A vLLM server that never comes up: a few waiting lines, then one clear error after ``vllm_server_timeout``.

The address is a real port on 127.0.0.1 that refuses connections (bound, never listening). The trainer's own
server mode waits in the client TRL builds (`trl_client`), a backend given to the trainer waits at its first
generation call (`ServerTransport.served_model`); both wait with `HealthWait` and end in one
`VLLMServerUnavailableError`, a `GenerationStopped`, instead of retried calls and dropped batches.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator

import pytest
import requests

from maxent_grpo import MaxEntGRPOTrainer, SamplingSettings, VLLMServerBackend
from maxent_grpo.training.generation.contract.protocol import GenerationStopped
from maxent_grpo.training.generation.server_client.transport import HealthWait, VLLMServerUnavailableError
from tests.support.training import letter_dataset, tiny_config, tiny_model_and_tokenizer


@pytest.fixture
def refused_url() -> Iterator[str]:
    """``http://127.0.0.1:<port>`` of a port that refuses connections: bound, never listening, held meanwhile."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def _zero_reward(completions, **kwargs):
    return [0.0] * len(completions)


def _warnings_about(caplog: pytest.LogCaptureFixture, url: str) -> list[str]:
    """The warnings (and worse) logged about the vLLM server at ``url``."""
    needle = f"vLLM server at {url}"
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and needle in r.getMessage()]


def test_health_wait_logs_one_line_then_one_per_report_interval(refused_url, caplog):
    caplog.set_level(logging.INFO)
    wait = HealthWait(refused_url, 2.5, get=requests.get, log=logging.getLogger("wait"), report_every=1)

    start = time.monotonic()
    cause = wait.wait(2.5)

    assert 2.5 <= time.monotonic() - start < 4
    assert cause == "ConnectionError: Connection refused"
    lines = _warnings_about(caplog, refused_url)
    assert lines[0].startswith(f"waiting for the vLLM server at {refused_url} to come up (ConnectionError: Connection")
    assert "giving up after 2.5 s (vllm_server_timeout)" in lines[0]
    # One poll a second, one line a second at most: the first, then "still waiting" with the count so far.
    assert 2 <= len(lines) <= 3, lines
    assert all(line.startswith(f"still waiting for the vLLM server at {refused_url} (") for line in lines[1:])
    assert " tries, " in lines[1] and " s of 2.5 s): ConnectionError: Connection refused" in lines[1]
    error = wait.error(cause)
    assert isinstance(error, GenerationStopped) and isinstance(error, ConnectionError)
    assert f"{wait.tries} tries" in str(error)


def test_server_mode_stops_at_vllm_server_timeout_with_one_error_naming_the_field(refused_url, tmp_path, caplog):
    # The disk transport ('auto' on a CPU trainer): no vLLM is needed in this environment to get this far.
    caplog.set_level(logging.INFO)
    model, tokenizer = tiny_model_and_tokenizer()
    config = tiny_config(
        tmp_path, use_vllm=True, vllm_mode="server", vllm_server_base_url=refused_url, vllm_server_timeout=2.0
    )

    start = time.monotonic()
    with pytest.raises(VLLMServerUnavailableError) as raised:
        MaxEntGRPOTrainer(
            model=model,
            reward_funcs=_zero_reward,
            args=config,
            train_dataset=letter_dataset(),
            processing_class=tokenizer,
        )

    assert 2.0 <= time.monotonic() - start < 10
    message = str(raised.value)
    assert message.startswith(f"the vLLM server at {refused_url} has not come up within 2 s (")
    assert message.endswith("give it longer (vllm_server_timeout)") and "Connection refused" in message
    assert len(_warnings_about(caplog, refused_url)) == 1


def test_a_backend_whose_server_never_comes_up_stops_training_at_once(refused_url, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    model, tokenizer = tiny_model_and_tokenizer()
    backend = VLLMServerBackend(
        refused_url, tokenizer=tokenizer, sampling=SamplingSettings(max_tokens=4), connection_timeout=2.0
    )
    trainer = MaxEntGRPOTrainer(
        model=model,
        reward_funcs=_zero_reward,
        args=tiny_config(tmp_path, max_steps=3),
        train_dataset=letter_dataset(),
        processing_class=tokenizer,
        generation_backend=backend,
    )
    calls = []
    generate = backend.generate
    backend.generate = lambda prompts, counts: calls.append(len(prompts)) or generate(prompts, counts)

    start = time.monotonic()
    with pytest.raises(
        VLLMServerUnavailableError, match=rf"^the vLLM server at {refused_url} has not come up"
    ) as raised:
        trainer.train()
    assert str(raised.value).endswith(
        "give it longer (connection_timeout; vllm_server_timeout for the trainer's built-in backend)"
    )

    # Stopped in the first generation step, not after every batch was dropped: its first call waited the whole
    # connection_timeout; the step's retry rounds (every process makes the same calls) each probe once and raise.
    assert 2.0 <= time.monotonic() - start < 5
    assert 1 <= len(calls) <= 1 + trainer.args.num_generations
    assert trainer.state.global_step == 0
    lines = _warnings_about(caplog, refused_url)
    assert len(lines) == 1 and lines[0].startswith("waiting for the vLLM server"), lines
    assert "giving up after 2 s (connection_timeout; " in lines[0]
    assert not [r for r in caplog.records if "Generation backend raised" in r.getMessage()]
    assert backend.stats["requests"] == 0
