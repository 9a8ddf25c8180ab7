"""The built-in backend a trainer gets when it is given none: a table from TRL's own fields to a backend.

``use_vllm=False`` selects `TransformersBackend`; ``use_vllm=True`` selects by ``vllm_mode``. Each builder reads
what it needs from the `GRPOTrainer` TRL just built (its vLLM machinery, tokenizer and sampling fields). In server
mode ``vllm_weight_transfer`` picks how the weights reach the server (`weight_transfer_name`).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch
from accelerate.utils import is_peft_model
from torch.distributed.tensor import DTensor

from maxent_grpo.serving.key_guard import KEY_VARIABLE
from maxent_grpo.training.generation.backends import colocate_engine
from maxent_grpo.training.generation.backends.transformers_backend import TransformersBackend
from maxent_grpo.training.generation.backends.vllm_colocate import VLLMColocateBackend
from maxent_grpo.training.generation.backends.vllm_server import VLLMServerBackend
from maxent_grpo.training.generation.backends.vllm_server_pool import VLLMServerPool
from maxent_grpo.training.generation.contract.protocol import GenerationBackend
from maxent_grpo.training.generation.contract.sampling import SamplingSettings
from maxent_grpo.training.generation.weights.directory import WeightDirectory
from maxent_grpo.training.generation.weights.location import is_memory_backed, weights_root
from maxent_grpo.training.generation.weights.nccl import NCCLTransfer


def _transformers(trainer: Any) -> GenerationBackend:
    return TransformersBackend(trainer)


def _vllm_colocate(trainer: Any) -> GenerationBackend:
    generation = trainer.vllm_generation
    # A CPU engine gets the weights through vLLM's own reload (see `colocate_engine`), a GPU engine through TRL's.
    on_cpu = colocate_engine.engine_on_cpu()
    weight_sync = colocate_engine.ReloadWeightSync(generation) if on_cpu else generation.sync_weights
    llm = generation.llm
    return VLLMColocateBackend(
        llm,
        trainer._tokenizer,
        sampling=SamplingSettings.from_trainer(trainer),
        weight_sync=weight_sync,
        sleep_mode=trainer.args.vllm_enable_sleep_mode,
        max_model_len=llm.llm_engine.model_config.max_model_len,
    )


def server_urls(args: Any) -> list[str]:
    """The vLLM servers of ``args`` (a `MaxEntGRPOConfig`): ``vllm_server_base_urls``, else the one of
    ``vllm_server_base_url`` (or ``vllm_server_host`` and ``vllm_server_port``)."""
    if args.vllm_server_base_urls:
        return [url.rstrip("/") for url in args.vllm_server_base_urls]
    return [args.vllm_server_base_url or f"http://{args.vllm_server_host}:{args.vllm_server_port}"]


class VLLMMissingError(ImportError):
    """vLLM is needed in the trainer's environment and not installed (`vllm_install_problem` says why)."""


def weight_transfer_name(args: Any) -> str:
    """``"nccl"`` or ``"disk"``: the ``vllm_weight_transfer`` of ``args`` (a `MaxEntGRPOConfig`), ``"auto"``
    resolved by the machine alone: to NCCL when the trainer runs on CUDA with one server, to disk otherwise (several
    servers, or CPU). A trainer with one server asks it instead (`transfer_agreement.agreed_weight_transfer`): this
    rule decides for a set of servers."""
    if args.vllm_weight_transfer != "auto":
        return args.vllm_weight_transfer
    several = args.vllm_mode == "server" and len(server_urls(args)) > 1
    return "nccl" if torch.cuda.is_available() and not args.use_cpu and not several else "disk"


def vllm_install_problem(args: Any, weight_transfer: str | None = None) -> str | None:
    """Why ``args`` (a `MaxEntGRPOConfig`) needs vLLM installed in the trainer's environment, which it is not; None
    when vLLM is installed or not needed, or not known to be needed yet.

    Colocate mode runs the engine in the trainer, and server mode with the NCCL weight transfer joins vLLM's NCCL
    communicator, so both need vLLM. Server mode with the disk transfer does not: the trainer speaks HTTP to the
    server and writes the weights into a directory the server reads (`server_client.trl_client`). In server mode the
    transfer is ``weight_transfer`` (the one agreed with the server), else ``vllm_weight_transfer`` where it is
    explicit; ``"auto"`` before the server is asked needs nothing yet.
    """
    if not args.use_vllm or importlib.util.find_spec("vllm") is not None:
        return None
    if args.vllm_mode != "server":
        return (
            f"use_vllm=True (vllm_mode={args.vllm_mode!r}) needs vLLM, which is not installed: pip install "
            "'maxent-grpo[vllm]', or set use_vllm to false to generate with transformers, or run the engine as a "
            "server elsewhere (vllm_mode: server with vllm_weight_transfer: disk needs no vLLM here)"
        )
    transfer = weight_transfer or args.vllm_weight_transfer
    if transfer != "nccl":
        return None
    resolved = " (the server's, 'auto' following it)" if args.vllm_weight_transfer == "auto" else ""
    return (
        f"use_vllm=True, vllm_mode='server' with vllm_weight_transfer={args.vllm_weight_transfer!r}{resolved} "
        "pushes the weights through vLLM's NCCL communicator, which needs vLLM in the trainer's environment, and it "
        "is not installed: set vllm_weight_transfer to 'disk' and start the server with --weight-transfer disk "
        "(HTTP and a directory the server reads, no vLLM here), or pip install 'maxent-grpo[vllm]'"
    )


def weights_directory(trainer: Any) -> WeightDirectory:
    """Where the disk transport writes the weights (`weights.location.weights_root`: ``vllm_weights_dir``, else a
    memory-backed directory for servers on this machine, else ``<output_dir>/_vllm-weights``), delta versions with
    ``vllm_weight_delta``. A memory-backed directory's versions are removed when the run ends."""
    args = trainer.args
    model_bytes = sum(
        getattr(parameter, "ds_numel", parameter.numel()) * parameter.element_size()
        for parameter in trainer.model.parameters()
    )  # a ZeRO-3 parameter's local numel is 0: ds_numel is its whole size
    root = weights_root(args.vllm_weights_dir, args.output_dir, server_urls(args), model_bytes)
    memory = not args.vllm_weights_dir and is_memory_backed(root)
    return WeightDirectory(root, delta=args.vllm_weight_delta, remove_at_exit=memory, private=memory)


def server_api_key(args: Any) -> str | None:
    """The key of the trainer's vLLM server: ``vllm_server_api_key``, else ``VLLM_API_KEY`` (as vLLM reads it)."""
    return args.vllm_server_api_key or os.environ.get(KEY_VARIABLE) or None


def _vllm_server(trainer: Any) -> GenerationBackend:
    args = trainer.args
    generation = trainer.vllm_generation
    disk = trainer.weight_transfer == "disk"  # agreed with the server (`transfer_agreement`)
    if args.vllm_weight_delta and not disk:
        raise ValueError(
            "vllm_weight_delta=True needs the disk weight transfer, and vllm_weight_transfer='auto' chose NCCL (the "
            "server serves it): set vllm_weight_transfer to 'disk' and start the server with --weight-transfer disk"
        )

    def trl_parameter_walk(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
        # TRL's walk over the model it holds (gathers ZeRO-3 / FSDP shards, merges PEFT adapters, vLLM's names).
        return generation._iter_named_params()

    write_behind = disk and live_parameter_walk(trainer) and args.async_generation

    urls = server_urls(args)
    if len(urls) > 1:
        return VLLMServerPool(
            urls,
            tokenizer=trainer._tokenizer,
            sampling=SamplingSettings.from_trainer(trainer),
            request_timeout=args.vllm_request_timeout,
            max_attempts=args.vllm_request_attempts,
            connection_timeout=args.vllm_server_timeout,
            weights_directory=weights_directory(trainer),
            weight_source=trl_parameter_walk,
            weight_write_behind=write_behind,
            api_key=server_api_key(args),
        )
    return VLLMServerBackend(
        urls[0],
        tokenizer=trainer._tokenizer,
        sampling=SamplingSettings.from_trainer(trainer),
        request_timeout=args.vllm_request_timeout,
        max_attempts=args.vllm_request_attempts,
        connection_timeout=args.vllm_server_timeout,
        weight_transfer=None if disk else NCCLTransfer(generation),
        weights_directory=weights_directory(trainer) if disk else None,
        weight_source=trl_parameter_walk,
        weight_write_behind=write_behind,
        api_key=server_api_key(args),
    )


def live_parameter_walk(trainer: Any) -> bool:
    """Whether TRL's parameter walk yields the model's live parameters, which nothing but the optimizer step changes:
    not under DeepSpeed (its engine steps the optimizer inside the backward pass, and ZeRO-3 gathers), FSDP or a
    model sharded when it was loaded (DTensor parameters: the walk gathers each whole) or PEFT (adapters merged into
    the weights for the walk, and unmerged after it)."""
    model = trainer.model
    sharded = any(isinstance(parameter, DTensor) for parameter in model.parameters())
    return not (trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled or sharded or is_peft_model(model))


#: Backend name -> builder (see `backend_name`).
BUILT_IN_BACKENDS: dict[str, Callable[[Any], GenerationBackend]] = {
    "transformers": _transformers,
    "vllm_colocate": _vllm_colocate,
    "vllm_server": _vllm_server,
}


def backend_name(use_vllm: bool, vllm_mode: str) -> str:
    """The built-in backend TRL's ``use_vllm`` / ``vllm_mode`` select: ``transformers``, ``vllm_colocate`` or
    ``vllm_server``."""
    return f"vllm_{vllm_mode}" if use_vllm else "transformers"


def build_backend(trainer: Any) -> GenerationBackend:
    """The built-in backend for ``trainer`` (a `GRPOTrainer` whose `__init__` has run, so its ``use_vllm`` and
    ``vllm_mode`` are TRL's)."""
    return BUILT_IN_BACKENDS[backend_name(trainer.use_vllm, trainer.vllm_mode)](trainer)
