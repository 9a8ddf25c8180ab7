"""The key a vLLM server's every route asks for: vLLM's ``--api-key`` guards only its ``/v1`` routes.

vLLM's own key (``--api-key`` or ``VLLM_API_KEY``) is checked on paths under ``/v1``, ``/v2``, ``/inference`` and
``/cohere`` only. The development endpoints (``/pause``, ``/resume``, ``/is_paused``, and those the trainer's weight
push uses: ``/collective_rpc``, ``/reset_prefix_cache``, ``/update_weight_version``, ``/weight_info``) and
``/health`` answer anyone who can reach the server: on a server listening beyond 127.0.0.1, anyone could stall
generation or make the engine load weights from any path it can read. `ServerKeyGuard`, added to the server with
``--middleware`` (`MIDDLEWARE_QUALNAME`; ``maxent-grpo vllm-serve`` adds it), refuses every request, on every path,
that does not carry ``Authorization: Bearer <key>`` with the key from ``VLLM_API_KEY``, with HTTP 401. Without a key
in ``VLLM_API_KEY`` it lets everything through (a server on 127.0.0.1 for one user).

This module runs inside the server's API process; it imports nothing of the trainer, nor of vLLM.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

#: The environment variable both vLLM and `ServerKeyGuard` read the key from.
KEY_VARIABLE = "VLLM_API_KEY"
#: The ``--middleware`` value that adds `ServerKeyGuard` to a vLLM server.
MIDDLEWARE_QUALNAME = f"{__name__}.ServerKeyGuard"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def authorization_headers(key: str | None) -> dict[str, str]:
    """The header a request to a server guarded by ``key`` carries (none when ``key`` is None or empty)."""
    return {"Authorization": f"Bearer {key}"} if key else {}


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


class ServerKeyGuard:
    """Pure ASGI middleware: a request without the server's key gets HTTP 401, whatever its path.

    Args:
        app: the application it guards (vLLM's FastAPI app; ``app.add_middleware`` passes it).

    The key is read once, from ``VLLM_API_KEY``, when the server builds its middleware; it is compared by digest in
    constant time. ``OPTIONS`` requests (CORS preflight, which carry no credentials) and non-HTTP scopes (lifespan)
    pass, as with vLLM's own check.
    """

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app
        key = os.environ.get(KEY_VARIABLE, "")
        self._key = _digest(key) if key else None

    def _authorized(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", ()):
            if name.lower() == b"authorization":
                scheme, _, token = value.decode("latin-1").partition(" ")
                return scheme.lower() == "bearer" and hmac.compare_digest(_digest(token), self._key or b"")
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        guarded = self._key is not None and scope["type"] in ("http", "websocket") and scope.get("method") != "OPTIONS"
        if not guarded or self._authorized(scope):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps({"error": "Unauthorized: this server asks for its key (Authorization: Bearer <key>)"})
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body.encode()})
