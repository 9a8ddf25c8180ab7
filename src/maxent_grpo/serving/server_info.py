"""How a vLLM server says which weight transfer it serves: vLLM's own ``GET /server_info``.

A server started with ``VLLM_SERVER_DEV_MODE=1`` (``maxent-grpo vllm-serve`` sets it for either transfer) answers
``GET /server_info?config_format=json`` with its resolved configuration, ``{"vllm_config": {...}, ...}``. Two of its
fields name the weight transfer the server can take, as the server was started:

- ``weight_transfer_config``: ``{"backend": "nccl"}`` for ``--weight-transfer-config '{"backend": "nccl"}'``
  (``--weight-transfer nccl``; TRL's NCCL push), else null;
- ``parallel_config.worker_extension_cls``: this package's reload extension
  (``maxent_grpo.serving.reload_extension.DiskReloadExtension``) for ``--worker-extension-cls``
  (``--weight-transfer disk``; the disk reload), else ``""``. An extension of another name
  is taken for a subclass of it (a server's own additions to the reload): whether it reloads is known at the first
  push, which stops the run if it does not.

The trainer reads them before anything loads (`served_transports`), so its ``vllm_weight_transfer="auto"`` follows
the server and an explicit choice the server does not serve stops with one line. The route is one the server's route
allowlist lets through (`routes.SERVER_INFO`, the name both sides use). It imports nothing of the trainer, nor of vLLM.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The query that makes ``GET /server_info`` (`routes.SERVER_INFO`) answer its configuration as JSON (its default is
#: one string).
SERVER_INFO_QUERY = {"config_format": "json"}


def served_transports(vllm_config: Mapping[str, Any]) -> frozenset[str]:
    """The weight transfers (``"disk"``, ``"nccl"``) a server whose ``/server_info`` reported ``vllm_config`` takes:
    empty for a server started with neither (it can generate, but no weights reach it)."""
    served = set()
    transfer = vllm_config.get("weight_transfer_config") or {}
    if transfer.get("backend") == "nccl":
        served.add("nccl")
    if (vllm_config.get("parallel_config") or {}).get("worker_extension_cls"):  # ours, or taken for a subclass
        served.add("disk")
    return frozenset(served)
