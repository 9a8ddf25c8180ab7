"""What a reward function call may retry: timeouts, connection / OS errors, HTTP 408 / 429 / 5xx."""

from __future__ import annotations

import email.message
import urllib.error

import httpx
import pytest
import requests

from maxent_grpo.training.reward_scoring.transient import is_timeout, is_transient


def _requests_error(status: int) -> requests.HTTPError:
    response = requests.Response()
    response.status_code = status
    return requests.HTTPError(f"{status}", response=response)


def _httpx_error(status: int) -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "http://127.0.0.1/score")
    return httpx.HTTPStatusError(f"{status}", request=request, response=httpx.Response(status, request=request))


@pytest.mark.parametrize(
    "error",
    [
        TimeoutError("slow"),
        ConnectionRefusedError("refused"),
        OSError("broken pipe"),
        requests.ConnectionError("down"),
        requests.Timeout("slow"),
        httpx.ConnectError("down"),
        httpx.ReadTimeout("slow"),
        _requests_error(503),
        _requests_error(429),
        _httpx_error(408),
        _httpx_error(500),
        urllib.error.HTTPError("http://127.0.0.1", 502, "bad gateway", email.message.Message(), None),
    ],
    ids=repr,
)
def test_transient_errors_are_retried(error):
    assert is_transient(error)


@pytest.mark.parametrize(
    "error",
    [
        TypeError("bad argument"),
        ValueError("no number"),
        KeyError("answer"),
        _requests_error(400),
        _requests_error(404),
        _httpx_error(401),
        urllib.error.HTTPError("http://127.0.0.1", 404, "not found", email.message.Message(), None),
    ],
    ids=repr,
)
def test_other_errors_are_not(error):
    assert not is_transient(error)


@pytest.mark.parametrize("error", [TimeoutError("slow"), requests.ReadTimeout("slow"), httpx.ReadTimeout("slow")])
def test_timeouts_of_every_client_count_as_timeouts(error):
    assert is_timeout(error)


@pytest.mark.parametrize("error", [ConnectionRefusedError("refused"), requests.ConnectionError("down")])
def test_other_transient_errors_do_not(error):
    assert not is_timeout(error)
