"""TRL's vLLM server client, built without its NCCL communicator and without vLLM when the weights travel by disk.

With ``use_vllm=True, vllm_mode="server"`` TRL 1.16 refuses to start unless vLLM is importable in the trainer's
environment, builds a `VLLMClient` and calls its ``init_communicator`` unconditionally, which raises
NotImplementedError for any device but CUDA (and a vLLM-CPU server cannot join an NCCL group either). With the disk
transport (`server_weight_sync`) the trainer needs neither: its backend speaks HTTP to the server and writes weights
with safetensors, and TRL's client is used only for its HTTP calls (the server's log-probs mode). So while TRL builds
its vLLM machinery inside `client_for_disk_transfer`, it sees vLLM as available and the client it builds skips the
communicator: a trainer node needs no vLLM install, as a node of a cluster whose servers run elsewhere would not.
TRL has no hook for it, so the names TRL calls are replaced for that one construction, the way
`colocate_engine.engine_dtype` does for the engine.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

logger = logging.getLogger(__name__)

# Trainers built at once in several threads take turns, so none sees another's replacement.
_BUILD_LOCK = threading.Lock()


@contextmanager
def _replaced(module: Any, name: str, value: Any) -> Iterator[None]:
    original = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, original)


@contextmanager
def client_for_disk_transfer() -> Iterator[None]:
    """While TRL builds its server client inside this block, build it without vLLM and without the NCCL group."""
    generation = importlib.import_module("trl.generation.vllm_generation")
    client_module = importlib.import_module("trl.generation.vllm_client")
    with _BUILD_LOCK, ExitStack() as replacements:
        client = generation.VLLMClient

        class DiskTransferClient(client):  # type: ignore[misc, valid-type]
            """TRL's client; the weights reach the server by disk, so no NCCL group is set up."""

            def init_communicator(self, device: Any = 0) -> None:
                logger.info("vLLM server at %s: weights go by disk, no NCCL group is set up", self.base_url)

        def vllm_not_needed(*args: Any, **kwargs: Any) -> bool:
            return True

        replacements.enter_context(_replaced(generation, "VLLMClient", DiskTransferClient))
        replacements.enter_context(_replaced(generation, "is_vllm_available", vllm_not_needed))
        replacements.enter_context(_replaced(client_module, "is_vllm_available", vllm_not_needed))
        yield
