"""A stand-in for what a vLLM server answers before any generation: ``GET /health`` and ``GET /server_info``.

`serving_info` listens on 127.0.0.1 and answers ``/server_info?config_format=json`` with the ``vllm_config`` given
(for instance that of a server started with ``--weight-transfer nccl``, which no CPU machine can start), or 404 where
it is None (a server without its development endpoints). Test-only.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from maxent_grpo.serving.routes import SERVER_INFO


def vllm_config(*, nccl: bool = False, extension: str = "") -> dict[str, Any]:
    """The fields of vLLM 0.31's ``/server_info`` configuration the trainer reads, for a server started with the NCCL
    weight transfer (``nccl``) and/or the worker extension ``extension``."""
    return {
        "weight_transfer_config": {"backend": "nccl"} if nccl else None,
        "parallel_config": {"worker_extension_cls": extension},
        "model_config": {"logprobs_mode": "processed_logprobs"},
    }


@contextmanager
def serving_info(config: dict[str, Any] | None) -> Iterator[str]:
    """A server on 127.0.0.1 answering ``/health`` and ``/server_info`` with ``config``; yields its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            if path == "/health":
                self._answer(200, b"")
            elif path == SERVER_INFO and config is not None:
                self._answer(200, json.dumps({"vllm_config": config, "vllm_env": {}}).encode())
            else:
                self._answer(404, b'{"detail": "Not Found"}')

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
