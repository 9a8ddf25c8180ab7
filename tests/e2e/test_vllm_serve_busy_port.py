"""`maxent-grpo vllm-serve` on a port something already listens on: refused before a server starts, in one line.

Without the check, the command took the other server's ``/health`` answer for its own: it printed the ready line
(a URL to train against) and its own server died moments later on "address already in use".
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.e2e.cli_runner import offline_env, run_cli, with_vllm_that_cannot_serve


class Healthy(BaseHTTPRequestHandler):
    """Another server: answers 200 to everything, as a running vLLM server answers ``GET /health``."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_port_in_use_is_refused_before_the_server_starts(tmp_path):
    other = ThreadingHTTPServer(("127.0.0.1", 0), Healthy)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    port = other.server_address[1]
    try:
        environment = with_vllm_that_cannot_serve(offline_env(tmp_path))
        result = run_cli(["vllm-serve", str(tmp_path / "model"), "--port", str(port)], environment, 120)
    finally:
        other.shutdown()
        other.server_close()
    assert result.returncode == 1, result.stdout + result.stderr
    assert "ready" not in result.stdout
    assert result.stderr.strip() == (
        f"maxent-grpo vllm-serve: error: port {port} on 127.0.0.1 is already in use (another server?)"
    )
