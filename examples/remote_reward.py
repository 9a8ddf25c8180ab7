"""A reward function behind HTTP: a small scoring service, and the reward function that calls it.

Real reward functions call things that fail: an LLM judge behind HTTP, a code sandbox, a verifier. This example is
both sides. ``serve`` runs a scoring service (the standard library's `http.server`): ``POST /score`` with
``{"completions": [...]}`` answers ``{"rewards": [...]}`` (a completion's distinct characters over its length). For
trying out failures, ``POST /mode`` with ``{"mode": "ok" | "503" | "hang"}`` makes it answer normally, answer 503, or
hang. ``train`` trains the tiny model with `RemoteReward`, a reward function that calls the service through a
`requests.Session`, with ``reward_timeout`` and ``reward_retries`` set: a call that times out, is refused or answers
503 is retried, and rows still unscored after the retries leave the update (``scoring/*`` in the logs), never with a
made-up reward.

    python examples/remote_reward.py serve --port 8008 &
    python examples/remote_reward.py train --url http://127.0.0.1:8008 --max-steps 5
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests
from datasets import Dataset

from maxent_grpo import MaxEntGRPOConfig, MaxEntGRPOTrainer
from maxent_grpo.tiny_model import build_tiny_model, build_tiny_tokenizer

#: How long a hanging answer waits at most (the service's threads end even if nobody switches it back).
HANG_LIMIT_S = 60.0


def score(completion: str) -> float:
    """The service's reward: the completion's distinct characters over its length (0 for an empty one)."""
    return len(set(completion)) / len(completion) if completion else 0.0


class ScoringService(ThreadingHTTPServer):
    """The scoring service; its ``mode`` is "ok", "503" or "hang"."""

    daemon_threads = True  # a hanging answer never keeps the service from stopping

    def __init__(self, port: int) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.mode = "ok"


class _Handler(BaseHTTPRequestHandler):
    server: ScoringService

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path == "/mode":
            self.server.mode = body["mode"]
            return self._answer(200, {"mode": self.server.mode})
        if self.path != "/score":
            return self._answer(404, {"error": f"no route {self.path}"})
        if self.server.mode == "503":
            return self._answer(503, {"error": "overloaded"})
        deadline = time.monotonic() + HANG_LIMIT_S
        while self.server.mode == "hang" and time.monotonic() < deadline:
            time.sleep(0.05)
        self._answer(200, {"rewards": [score(text) for text in body["completions"]]})

    def _answer(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the caller gave up (its timeout)
            self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: one line per request would drown the trainer's logs."""


class RemoteReward:
    """TRL's reward signature, scored by the service at ``url``; HTTP errors are raised, never turned into rewards.

    ``request_timeout`` bounds each request in the client; the trainer's ``reward_timeout`` bounds the whole call.
    Set the client's a little below the trainer's so that a hanging service ends the request itself.
    """

    __name__ = "remote_score"

    def __init__(self, url: str, request_timeout: float) -> None:
        self.url = url.rstrip("/")
        self.request_timeout = request_timeout
        self._local = threading.local()  # a session per thread: a call left running past its timeout keeps its own

    @property
    def session(self) -> requests.Session:
        if not hasattr(self._local, "session"):
            self._local.session = requests.Session()
        return self._local.session

    def __call__(self, completions: list, **kwargs: object) -> list[float]:
        if not completions:  # a process without kept rows is called too, with none
            return []
        texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
        response = self.session.post(f"{self.url}/score", json={"completions": texts}, timeout=self.request_timeout)
        response.raise_for_status()  # 408 / 429 / 5xx are retried by the trainer, other statuses stop the run
        return response.json()["rewards"]


def train(url: str, max_steps: int, output_dir: str) -> MaxEntGRPOTrainer:
    """Train the tiny model for ``max_steps`` against the service at ``url``; return the trainer."""
    tokenizer = build_tiny_tokenizer()
    config = MaxEntGRPOConfig(
        output_dir=output_dir,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        max_steps=max_steps,
        learning_rate=1e-2,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        reward_timeout=2.0,  # a judge model: its slowest honest answer, with room to spare
        reward_retries=1,
        reward_max_consecutive_failed_batches=3,
    )
    trainer = MaxEntGRPOTrainer(
        model=build_tiny_model(tokenizer),
        reward_funcs=RemoteReward(url, request_timeout=1.0),
        args=config,
        train_dataset=Dataset.from_dict({"prompt": [f"p{i}:" for i in range(16)]}),
        processing_class=tokenizer,
    )
    trainer.train()
    return trainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    serve_parser = commands.add_parser("serve", help="run the scoring service on 127.0.0.1")
    serve_parser.add_argument("--port", type=int, default=8008)
    train_parser = commands.add_parser("train", help="train the tiny model against the service")
    train_parser.add_argument("--url", default="http://127.0.0.1:8008")
    train_parser.add_argument("--max-steps", type=int, default=5)
    args = parser.parse_args()
    if args.command == "serve":
        service = ScoringService(args.port)
        print(f"scoring service on http://127.0.0.1:{service.server_address[1]}", flush=True)
        service.serve_forever()
    else:
        with tempfile.TemporaryDirectory() as output_dir:
            trainer = train(args.url, args.max_steps, output_dir)
        unscored = sum(entry.get("scoring/unscored_rows", 0.0) for entry in trainer.state.log_history)
        print(f"{trainer.state.global_step} steps; rows left unscored: {unscored:g}")


if __name__ == "__main__":
    main()
