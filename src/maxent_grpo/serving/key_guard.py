"""The middleware every request to a ``maxent-grpo vllm-serve`` server passes first: the key, the route allowlist and
CORS preflights.

vLLM's own key (``--api-key`` or ``VLLM_API_KEY``) is checked on paths under ``/v1``, ``/v2``, ``/inference`` and
``/cohere`` only, and ``VLLM_SERVER_DEV_MODE=1`` (which the trainer's weight push needs) opens routes that pause,
sleep or wake the engine and run any worker method. `ServerKeyGuard`, added to the server with ``--middleware``
(`MIDDLEWARE_QUALNAME`; ``maxent-grpo vllm-serve`` adds it), answers before vLLM sees the request:

1. **The key.** With a key in ``VLLM_API_KEY``, a request that does not carry ``Authorization: Bearer <key>`` gets
   HTTP 401, on every path (``/health`` and ``/metrics`` included). Without a key (a server on 127.0.0.1 for one
   user) this step lets everything through.
2. **The allowlist** (`routes.RouteAllowlist`), with or without a key. A path that is not one of the routes the
   trainer uses or of vLLM's inference API gets HTTP 403 with one line saying that ``maxent-grpo vllm-serve`` does not
   serve it; ``POST /collective_rpc`` reaches vLLM only for a worker method of `routes.RPC_METHODS` (the reload
   extension's), read from the request's JSON body before vLLM reads it.
3. **CORS preflights.** An ``OPTIONS`` request that is a real preflight (an ``Origin`` and an
   ``Access-Control-Request-Method`` header) on an allowed route passes without the key, as browsers send no
   credentials with it, and vLLM's CORS middleware answers it, without a body. Any other ``OPTIONS`` request is
   judged like every other request.

The allowlist is read when the server builds its middleware: ``MAXENT_GRPO_ALLOWED_ROUTES`` (set by
``maxent-grpo vllm-serve --allow-route``) opens refused routes by name. The key is read from ``VLLM_API_KEY`` only: a
plain ``vllm serve --api-key KEY`` keeps its key to vLLM's own ``/v1`` check, so give the guard the key through
``VLLM_API_KEY`` (``maxent-grpo vllm-serve --api-key`` does). This module runs inside the server's API
process; it imports nothing of the trainer, nor of vLLM.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from maxent_grpo.serving import routes

#: The environment variable both vLLM and `ServerKeyGuard` read the key from.
KEY_VARIABLE = "VLLM_API_KEY"
#: The ``--middleware`` value that adds `ServerKeyGuard` to a vLLM server.
MIDDLEWARE_QUALNAME = f"{__name__}.ServerKeyGuard"
#: The largest ``POST /collective_rpc`` body the guard reads to find the worker method (the trainer's is a few
#: hundred bytes); a larger one is refused with HTTP 413.
RPC_BODY_LIMIT = 1 << 20

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def authorization_headers(key: str | None) -> dict[str, str]:
    """The header a request to a server guarded by ``key`` carries (none when ``key`` is None or empty)."""
    return {"Authorization": f"Bearer {key}"} if key else {}


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def _header(scope: Scope, name: bytes) -> str | None:
    """The first value of header ``name`` (lower case) of the request, or None."""
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def route_path(scope: Scope) -> str:
    """The path the app routes the request by: ``path`` less the ``root_path`` a server started with ``--root-path``
    puts before every route (Starlette's rule, restated here so that the guard imports nothing of the server)."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    if root and path.startswith(root) and (len(path) == len(root) or path[len(root)] == "/"):
        return path[len(root) :]
    return path


def opened_routes(environment: MutableMapping[str, str] | None = None) -> list[str]:
    """The refused routes opened by name (``MAXENT_GRPO_ALLOWED_ROUTES``, comma-separated) in ``environment``
    (default: this process's)."""
    value = (os.environ if environment is None else environment).get(routes.ALLOWED_ROUTES_VARIABLE, "")
    return [route.strip() for route in value.split(",") if route.strip()]


async def _answer(send: Send, status: int, error: str) -> None:
    body = json.dumps({"error": error}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class ServerKeyGuard:
    """Pure ASGI middleware: the key, the route allowlist and CORS preflights (see the module docstring).

    Args:
        app: the application it guards (vLLM's FastAPI app; ``app.add_middleware`` passes it).

    The key is read once, from ``VLLM_API_KEY``, when the server builds its middleware, and compared by digest in
    constant time; the opened routes likewise, from ``MAXENT_GRPO_ALLOWED_ROUTES``. Non-HTTP scopes (lifespan) pass.

    Raises:
        ValueError: ``MAXENT_GRPO_ALLOWED_ROUTES`` names a route that is not one the guard refuses (the server does not
            start).
    """

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app
        key = os.environ.get(KEY_VARIABLE, "")
        self._key = _digest(key) if key else None
        self.allowlist = routes.RouteAllowlist(opened_routes())

    def _authorized(self, scope: Scope) -> bool:
        if self._key is None:
            return True
        value = _header(scope, b"authorization")
        if value is None:
            return False
        scheme, _, token = value.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(_digest(token), self._key)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path, method = route_path(scope), scope.get("method", "GET")
        allowed = self.allowlist.allows(path)
        if scope["type"] == "websocket":
            if allowed and self._authorized(scope):
                await self.app(scope, receive, send)
            else:
                await send({"type": "websocket.close", "code": 1008})
            return
        preflight = (
            method == "OPTIONS"
            and _header(scope, b"origin") is not None
            and _header(scope, b"access-control-request-method") is not None
        )
        if preflight and allowed:
            await self.app(scope, receive, _without_body(send))
            return
        if not self._authorized(scope):
            await _answer(send, 401, "Unauthorized: this server asks for its key (Authorization: Bearer <key>)")
            return
        if not allowed:
            await _answer(send, 403, routes.refusal(method, path))
            return
        if path == routes.COLLECTIVE_RPC and method != "OPTIONS":
            receive = await self._check_rpc(receive, send)
            if receive is None:
                return
        await self.app(scope, receive, send)

    async def _check_rpc(self, receive: Receive, send: Send) -> Receive | None:
        """Read the ``/collective_rpc`` body; answer 403 (413 when too large) and return None unless its worker method
        is one of `routes.RPC_METHODS`, else return a ``receive`` that hands the body read to vLLM."""
        chunks, size, more, last = [], 0, True, None
        while more:
            last = await receive()
            if last["type"] != "http.request":  # the client went away
                return None
            chunk = last.get("body", b"")
            size += len(chunk)
            if size > RPC_BODY_LIMIT:
                await _answer(send, 413, f"a {routes.COLLECTIVE_RPC} body is at most {RPC_BODY_LIMIT} bytes")
                return None
            chunks.append(chunk)
            more = last.get("more_body", False)
        body = b"".join(chunks)
        try:
            requested = json.loads(body).get("method")
        except (ValueError, AttributeError, RecursionError):  # not JSON, not an object, or nested past the parser
            requested = None
        if not isinstance(requested, str) or requested not in routes.RPC_METHODS:
            await _answer(send, 403, routes.rpc_refusal(requested))
            return None
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        return replay


def _without_body(send: Send) -> Send:
    """``send`` for a preflight's answer: its status and headers, with an empty body (``content-length: 0``)."""

    async def bodiless(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [
                (name, value) for name, value in message.get("headers", ()) if name.lower() != b"content-length"
            ]
            await send({**message, "headers": [*headers, (b"content-length", b"0")]})
        elif message["type"] == "http.response.body":
            if not message.get("more_body", False):
                await send({"type": "http.response.body", "body": b""})
        else:
            await send(message)

    return bodiless
