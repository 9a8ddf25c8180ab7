"""The weight transfer a trainer and its vLLM server agree on, read from the server before anything loads.

A server takes the training weights one way, fixed when it starts (``maxent-grpo vllm-serve --weight-transfer
disk|nccl``), and says which through vLLM's ``GET /server_info`` (`serving.server_info`). In server mode the trainer
asks it first, waiting for the server as TRL's client would (``vllm_server_timeout``), so that

- ``vllm_weight_transfer="auto"`` follows the server: the transfer it serves (where it serves both, NCCL on a CUDA
  trainer with vLLM installed, disk otherwise);
- an explicit ``"disk"`` or ``"nccl"`` the server does not serve stops before the model loads, with one line naming
  both sides and the flag to change (`WeightTransferMismatchError`), instead of failing at the first weight push.

A set of servers (``vllm_server_base_urls``) takes the disk transfer only (the config refuses NCCL there) and is not
asked: any of its servers may still be starting while the others train.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
from typing import Any

import requests
import torch

from maxent_grpo.serving.key_guard import authorization_headers
from maxent_grpo.serving.routes import SERVER_INFO
from maxent_grpo.serving.server_info import SERVER_INFO_QUERY, served_transports
from maxent_grpo.training.generation.backends.selection import server_api_key, server_urls, weight_transfer_name
from maxent_grpo.training.generation.server_client.transport import HealthWait

logger = logging.getLogger(__name__)

_SERVE = "maxent-grpo vllm-serve MODEL --weight-transfer"


class WeightTransferMismatchError(ValueError):
    """The trainer's ``vllm_weight_transfer`` and what its vLLM server serves do not go together."""


def agree(wanted: str, served: frozenset[str], *, base_url: str, cuda: bool, vllm_here: bool = True) -> str:
    """The transfer (``"disk"`` or ``"nccl"``) of a trainer asking for ``wanted`` (its ``vllm_weight_transfer``)
    from the server at ``base_url`` serving ``served``; ``cuda``: whether the trainer runs on CUDA; ``vllm_here``:
    whether vLLM is installed in the trainer's environment (NCCL needs both; where the server serves both transfers,
    ``"auto"`` takes NCCL only then).

    Raises:
        WeightTransferMismatchError: the server serves no transfer, not the one asked for, or only NCCL to a trainer
            without CUDA; the message names both sides and what to change.
    """
    server = f"the vLLM server at {base_url}"
    if not served:
        return _refuse(
            f"vllm_weight_transfer={wanted!r} here, but {server} takes no weights (started without "
            f"--weight-transfer-config or the disk reload extension): restart it with `{_SERVE} "
            f"{'disk' if wanted == 'auto' else wanted}`"
        )
    if wanted == "auto":
        if served == {"nccl"} and not cuda:
            return _refuse(
                f"vllm_weight_transfer='auto' here, on a trainer without CUDA, but {server} serves only NCCL: "
                f"restart it with `{_SERVE} disk`"
            )
        if len(served) == 1:
            return next(iter(served))
        return "nccl" if cuda and vllm_here else "disk"
    if wanted not in served:
        (other,) = served
        return _refuse(
            f"vllm_weight_transfer={wanted!r} here, but {server} serves {other!r} (started with --weight-transfer "
            f"{other}): set vllm_weight_transfer to {other!r} (or 'auto'), or restart the server with `{_SERVE} "
            f"{wanted}`"
        )
    return wanted


def _refuse(message: str) -> str:
    raise WeightTransferMismatchError(message)


def served_by(base_url: str, *, api_key: str | None, timeout: float) -> frozenset[str]:
    """The transfers the server at ``base_url`` serves, once it is up (waiting ``timeout`` seconds at most, as
    `HealthWait` does).

    Raises:
        VLLMServerUnavailableError: the server has not come up within ``timeout``.
        WeightTransferMismatchError: the server does not answer ``/server_info`` (started without
            ``VLLM_SERVER_DEV_MODE=1``, which either transfer needs, or the trainer lacks its key).
    """
    headers = authorization_headers(api_key)
    wait = HealthWait(base_url, timeout, get=functools.partial(requests.get, headers=headers), log=logger)
    health = wait.wait(timeout)
    if isinstance(health, str):
        raise wait.error(health)
    # vLLM gathers its environment report on the first answer (a few seconds), then keeps it.
    response = requests.get(
        f"{base_url}{SERVER_INFO}", params=SERVER_INFO_QUERY, headers=headers, timeout=max(timeout, 30.0)
    )
    if response.status_code == 404:
        raise WeightTransferMismatchError(
            f"the vLLM server at {base_url} does not answer {SERVER_INFO} (started without "
            "VLLM_SERVER_DEV_MODE=1), so no weights can reach it: start it with `maxent-grpo vllm-serve MODEL`"
        )
    if response.status_code != 200:
        raise WeightTransferMismatchError(
            f"the vLLM server at {base_url} answered {SERVER_INFO} with HTTP {response.status_code} "
            f"({response.text[:200]}), so the trainer cannot tell how weights reach it"
            + (": check vllm_server_api_key" if response.status_code in (401, 403) else "")
        )
    return served_transports(response.json()["vllm_config"])


def agreed_weight_transfer(args: Any) -> str | None:
    """The weight transfer of a trainer with ``args`` (a `MaxEntGRPOConfig`): in server mode with one server, the one
    it and the server agree on (`agree`, the server asked by `served_by`); with a set of servers,
    `selection.weight_transfer_name` (disk); None outside server mode."""
    if not (args.use_vllm and args.vllm_mode == "server"):
        return None
    urls = server_urls(args)
    if len(urls) > 1:
        return weight_transfer_name(args)
    served = served_by(urls[0], api_key=server_api_key(args), timeout=args.vllm_server_timeout)
    cuda = torch.cuda.is_available() and not args.use_cpu
    vllm_here = importlib.util.find_spec("vllm") is not None
    return agree(args.vllm_weight_transfer, served, base_url=urls[0], cuda=cuda, vllm_here=vllm_here)
