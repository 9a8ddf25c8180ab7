"""TRL's vLLM server client, built without its NCCL communicator when the weights travel by disk.

With ``use_vllm=True, vllm_mode="server"`` TRL 1.16 builds a `VLLMClient` and calls its ``init_communicator``
unconditionally, which raises NotImplementedError for any device but CUDA (and a vLLM-CPU server cannot join an
NCCL group either). With the disk transport (`server_weight_sync`) no communicator is needed: while TRL builds its
vLLM machinery inside `without_nccl_communicator`, the client it builds skips that call. TRL has no hook for it, so
the ``VLLMClient`` name TRL calls is replaced for that one construction, the way `colocate_engine.engine_dtype` does
for the engine.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

logger = logging.getLogger(__name__)

# Trainers built at once in several threads take turns, so none sees another's replacement.
_BUILD_LOCK = threading.Lock()


@contextmanager
def without_nccl_communicator() -> Iterator[None]:
    """While TRL builds its server client inside this block, build it without the NCCL weight-transfer group."""
    module = importlib.import_module("trl.generation.vllm_generation")
    with _BUILD_LOCK:
        client = module.VLLMClient

        class DiskTransferClient(client):  # type: ignore[misc, valid-type]
            """TRL's client; the weights reach the server by disk, so no NCCL group is set up."""

            def init_communicator(self, device: Any = 0) -> None:
                logger.info("vLLM server at %s: weights go by disk, no NCCL group is set up", self.base_url)

        module.VLLMClient = DiskTransferClient
        try:
            yield
        finally:
            module.VLLMClient = client
