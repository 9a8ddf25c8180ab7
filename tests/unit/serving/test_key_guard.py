"""`ServerKeyGuard`: the key on every route, the route and worker-method allowlist with and without a key, and CORS
preflights. Driven as the server drives it: the ASGI calls, scope by scope."""

from __future__ import annotations

import asyncio
import json

import pytest

from maxent_grpo.serving import routes
from maxent_grpo.serving.key_guard import (
    KEY_VARIABLE,
    RPC_BODY_LIMIT,
    ServerKeyGuard,
    authorization_headers,
)

KEY = "s3cret"
RELOAD = json.dumps({"method": routes.RELOAD_METHOD, "kwargs": {"weights_path": "/w/v1"}}).encode()
PREFLIGHT = {"Origin": "http://example.test", "Access-Control-Request-Method": "POST"}


def http(path: str, method: str = "GET", headers: dict[str, str] | None = None) -> dict:
    encoded = [(name.encode(), value.encode()) for name, value in (headers or {}).items()]  # as sent: any case
    return {"type": "http", "method": method, "path": path, "headers": encoded}


class Guarded:
    """`ServerKeyGuard` in front of an app that records what reached it (with the body it read) and answers 200 with
    a body, with ``key`` in ``VLLM_API_KEY`` and ``opened`` routes in ``MAXENT_GRPO_ALLOWED_ROUTES``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, key: str | None, opened: str = "") -> None:
        if key is None:
            monkeypatch.delenv(KEY_VARIABLE, raising=False)
        else:
            monkeypatch.setenv(KEY_VARIABLE, key)
        monkeypatch.setenv(routes.ALLOWED_ROUTES_VARIABLE, opened)
        self.reached: list[tuple[dict, bytes]] = []
        self.guard = ServerKeyGuard(self._app)

    async def _app(self, scope, receive, send) -> None:
        body, more = b"", scope["type"] == "http"
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        self.reached.append((scope, body))
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"7")]})
            await send({"type": "http.response.body", "body": b"payload"})

    def __call__(self, scope: dict, body: bytes = b"", chunk: int | None = None) -> tuple[bool, list[dict]]:
        """Whether the request reached the app behind the guard, and every message sent back."""
        before, sent = len(self.reached), []
        chunk = chunk or max(len(body), 1)
        parts = [body[i : i + chunk] for i in range(0, len(body), chunk)] or [b""]
        messages = [
            {"type": "http.request", "body": part, "more_body": i < len(parts) - 1} for i, part in enumerate(parts)
        ]

        async def receive():
            return messages.pop(0) if messages else {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)

        asyncio.run(self.guard(scope, receive, send))
        return len(self.reached) > before, sent


def status(sent: list[dict]) -> int:
    return sent[0]["status"]


def error(sent: list[dict]) -> str:
    return json.loads(sent[1]["body"])["error"]


@pytest.mark.parametrize("route", sorted(routes.TRAINER_ROUTES | routes.REFUSED_ROUTES | {"/metrics", "/nowhere"}))
def test_every_route_refuses_a_request_without_the_key(monkeypatch, route):
    guard = Guarded(monkeypatch, KEY)
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret"}, {"Authorization": ""}):
        for method in ("GET", "POST", "OPTIONS"):
            reached, sent = guard(http(route, method, headers))
            assert not reached, (route, method, headers)
            assert status(sent) == 401 and "Unauthorized" in error(sent)


@pytest.mark.parametrize("key", [KEY, None, ""])
def test_the_trainers_routes_reach_vllm_and_every_other_development_route_is_refused(monkeypatch, key):
    guard = Guarded(monkeypatch, key)
    headers = authorization_headers(key)
    for route in sorted(routes.TRAINER_ROUTES - {routes.COLLECTIVE_RPC} | {"/v1/chat/completions", "/metrics"}):
        assert guard(http(route, "POST", headers))[0], route
    assert guard(http("/v1/responses/resp-123/cancel", "POST", headers))[0]
    tricks = ["/nowhere", "//collective_rpc", "/collective_rpc/", "/Pause", "/v1/responses/a/b"]
    for route in [*sorted(routes.REFUSED_ROUTES), *tricks]:
        reached, sent = guard(http(route, "POST", headers))
        assert not reached, route
        assert status(sent) == 403
        assert error(sent).startswith(f"maxent-grpo vllm-serve does not serve POST {route}:"), error(sent)


@pytest.mark.parametrize("key", [KEY, None])
def test_collective_rpc_runs_the_reload_extension_only(monkeypatch, key):
    guard = Guarded(monkeypatch, key)
    rpc = http(routes.COLLECTIVE_RPC, "POST", authorization_headers(key))
    for chunk in (None, 7):  # the body read whole, or as it arrives in pieces, reaches vLLM unchanged
        reached, sent = guard(rpc, RELOAD, chunk)
        assert reached and status(sent) == 200
        assert guard.reached[-1][1] == RELOAD
    for body in (
        json.dumps({"method": "reload_weights", "kwargs": {"weights_path": "/elsewhere"}}).encode(),
        json.dumps({"method": "save_sharded_state", "kwargs": {"path": "/tmp/x"}}).encode(),
        json.dumps({"method": ["maxent_reload_weights"]}).encode(),
        json.dumps([routes.RELOAD_METHOD]).encode(),
        b"not json",
        b"",
    ):
        reached, sent = guard(rpc, body, 5)
        assert not reached and status(sent) == 403, body
        assert "does not run the worker method" in error(sent)
    reached, sent = guard(rpc, b" " * (RPC_BODY_LIMIT + 1), 1 << 16)
    assert not reached and status(sent) == 413


def test_a_real_preflight_on_an_allowed_route_passes_without_the_key_and_gets_no_body(monkeypatch):
    guard = Guarded(monkeypatch, KEY)
    for route in ("/v1/completions", "/metrics", routes.COLLECTIVE_RPC):
        reached, sent = guard(http(route, "OPTIONS", PREFLIGHT))
        assert reached, route
        assert status(sent) == 200 and (b"content-length", b"0") in sent[0]["headers"]
        assert [message["body"] for message in sent[1:]] == [b""]
    for headers in ({"Origin": "http://example.test"}, {"Access-Control-Request-Method": "GET"}, {}):
        reached, sent = guard(http("/metrics", "OPTIONS", headers))  # not a preflight: judged like any request
        assert not reached and status(sent) == 401
    reached, sent = guard(http("/pause", "OPTIONS", PREFLIGHT))
    assert not reached and status(sent) == 401
    reached, sent = guard(http("/pause", "OPTIONS", {**PREFLIGHT, **authorization_headers(KEY)}))
    assert not reached and status(sent) == 403


def test_allow_route_opens_a_refused_route_by_name_and_only_those(monkeypatch):
    guard = Guarded(monkeypatch, None, opened="/sleep, /wake_up")
    assert guard(http("/sleep", "POST"))[0] and guard(http("/wake_up", "POST"))[0]
    assert not guard(http("/pause", "POST"))[0]
    with pytest.raises(ValueError, match=r"--allow-route /nowhere: not a route that maxent-grpo vllm-serve refuses"):
        Guarded(monkeypatch, None, opened="/sleep,/nowhere")


def test_a_server_under_a_root_path_is_guarded_by_its_routes(monkeypatch):
    guard = Guarded(monkeypatch, None)
    under = {"root_path": "/llm"}
    assert guard({**http("/llm/v1/completions", "POST"), **under})[0]
    for path in ("/llm/pause", "/llm//collective_rpc", "/llmx/health"):
        reached, sent = guard({**http(path, "POST"), **under})
        assert not reached and status(sent) == 403, path


def test_the_header_name_and_scheme_are_case_insensitive_and_the_key_is_not(monkeypatch):
    guard = Guarded(monkeypatch, KEY)
    assert guard(http("/health", headers={"AUTHORIZATION": "bearer s3cret"}))[0]
    assert not guard(http("/health", headers={"Authorization": "Bearer S3CRET"}))[0]


def test_lifespan_passes_and_a_websocket_needs_the_key_and_an_allowed_route(monkeypatch):
    guard = Guarded(monkeypatch, KEY)
    assert guard({"type": "lifespan"})[0]
    closed = [{"type": "websocket.close", "code": 1008}]
    assert guard({"type": "websocket", "path": "/v1/realtime", "headers": []}) == (False, closed)
    keyed = [(b"authorization", f"Bearer {KEY}".encode())]
    assert guard({"type": "websocket", "path": "/v1/realtime", "headers": keyed})[0]
    assert guard({"type": "websocket", "path": "/sleep", "headers": keyed}) == (False, closed)


def test_authorization_headers():
    assert authorization_headers("k") == {"Authorization": "Bearer k"}
    assert authorization_headers(None) == authorization_headers("") == {}
