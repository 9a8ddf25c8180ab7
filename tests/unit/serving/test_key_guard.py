"""`ServerKeyGuard`: with a key in ``VLLM_API_KEY``, every route refuses a request without it; without one, nothing
is refused. Driven as the server drives it: the ASGI calls, scope by scope."""

from __future__ import annotations

import asyncio
import json

import pytest

from maxent_grpo.serving.key_guard import (
    KEY_VARIABLE,
    ServerKeyGuard,
    authorization_headers,
)

ROUTES = ("/health", "/v1/models", "/v1/completions", "/pause", "/resume", "/is_paused", "/collective_rpc",
          "/reset_prefix_cache", "/update_weight_version", "/weight_info")  # fmt: skip


def http(path: str, method: str = "GET", headers: dict[str, str] | None = None) -> dict:
    encoded = [(name.lower().encode(), value.encode()) for name, value in (headers or {}).items()]
    return {"type": "http", "method": method, "path": path, "headers": encoded}


class Guarded:
    """`ServerKeyGuard` in front of an app that records what reached it, with ``key`` in ``VLLM_API_KEY``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, key: str | None) -> None:
        if key is None:
            monkeypatch.delenv(KEY_VARIABLE, raising=False)
        else:
            monkeypatch.setenv(KEY_VARIABLE, key)
        self.reached: list[dict] = []
        self.guard = ServerKeyGuard(self._app)

    async def _app(self, scope, receive, send) -> None:
        self.reached.append(scope)

    def __call__(self, scope: dict) -> tuple[bool, list[dict]]:
        """Whether the request reached the app behind the guard, and what the guard itself sent."""
        before, sent = len(self.reached), []

        async def receive():
            return {"type": "http.request"}

        async def send(message):
            sent.append(message)

        asyncio.run(self.guard(scope, receive, send))
        return len(self.reached) > before, sent


@pytest.mark.parametrize("route", ROUTES)
def test_every_route_refuses_a_request_without_the_key(monkeypatch, route):
    guard = Guarded(monkeypatch, "s3cret")
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret"}, {"Authorization": ""}):
        reached, sent = guard(http(route, "POST", headers))
        assert not reached, (route, headers)
        assert sent[0]["status"] == 401
        assert "Unauthorized" in json.loads(sent[1]["body"])["error"]
    reached, sent = guard(http(route, "POST", authorization_headers("s3cret")))
    assert reached and not sent


def test_the_header_name_and_scheme_are_case_insensitive_and_the_key_is_not(monkeypatch):
    guard = Guarded(monkeypatch, "s3cret")
    assert guard(http("/pause", headers={"AUTHORIZATION": "bearer s3cret"}))[0]
    assert not guard(http("/pause", headers={"Authorization": "Bearer S3CRET"}))[0]


def test_without_a_key_nothing_is_refused(monkeypatch):
    for key in (None, ""):
        guard = Guarded(monkeypatch, key)
        assert all(guard(http(route))[0] for route in ROUTES)


def test_preflight_and_lifespan_pass_and_a_keyless_websocket_is_closed(monkeypatch):
    guard = Guarded(monkeypatch, "s3cret")
    assert guard(http("/pause", "OPTIONS"))[0]
    assert guard({"type": "lifespan"})[0]
    reached, sent = guard({"type": "websocket", "path": "/v1/realtime", "headers": []})
    assert not reached and sent == [{"type": "websocket.close", "code": 1008}]


def test_authorization_headers():
    assert authorization_headers("k") == {"Authorization": "Bearer k"}
    assert authorization_headers(None) == authorization_headers("") == {}
