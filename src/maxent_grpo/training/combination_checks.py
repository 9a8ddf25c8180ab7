"""The combinations of a trainer's arguments it refuses before anything is loaded, each with one clear line.

The config checks what its fields decide alone (`MaxEntGRPOConfig`); these need the trainer's other arguments too (its
backend, ``tools``, ``environment_factory``, ``rollout_func``, the training data).
"""

from __future__ import annotations

from typing import Any

from maxent_grpo.training.generation.backends.selection import VLLMMissingError, vllm_install_problem
from maxent_grpo.training.generation.backends.transfer_agreement import agreed_weight_transfer

IMAGE_COLUMNS = ("image", "images")


def check_combinations(config: Any, generation_backend: Any, trainer_kwargs: dict[str, Any]) -> str | None:
    """Refuse a combination `MaxEntGRPOTrainer` does not support (see each message); in server mode, agree on the
    weight transfer with the server (`transfer_agreement`), once every check that needs no server has passed.

    Returns:
        The weight transfer agreed with the vLLM server (``"disk"`` or ``"nccl"``); None outside server mode.

    Raises:
        ValueError: fields, arguments or data that do not go together, or a weight transfer the server does not
            serve (`transfer_agreement.WeightTransferMismatchError`).
        VLLMMissingError: an `ImportError`, ``use_vllm`` where vLLM is needed in this environment and not installed
            (`selection.vllm_install_problem`: colocate mode, or server mode with the NCCL weight transfer).
        VLLMServerUnavailableError: in server mode, a server that has not come up within ``vllm_server_timeout``.
    """
    if (problem := vllm_install_problem(config)) is not None:
        raise VLLMMissingError(problem)
    with_tools = bool(trainer_kwargs.get("tools")) or trainer_kwargs.get("environment_factory") is not None
    rollout_func = trainer_kwargs.get("rollout_func") is not None
    if rollout_func and (generation_backend is not None or with_tools):
        raise ValueError(
            "`rollout_func` is the generation backend: it cannot be combined with `generation_backend`, `tools` "
            "or `environment_factory`."
        )
    if with_tools and config.dynamic_sampling:
        raise ValueError("dynamic_sampling is not supported with `tools` or `environment_factory`.")
    if config.async_generation:
        check_async_generation(config, own_backend=generation_backend is not None or rollout_func, tools=with_tools)
    if config.use_vllm and config.vllm_mode == "colocate" and config.vllm_tensor_parallel_size > 1:
        raise ValueError("vllm_tensor_parallel_size > 1 is not supported by MaxEntGRPOTrainer's colocate backend.")
    columns = getattr(trainer_kwargs.get("train_dataset"), "column_names", None) or ()
    images = [column for column in IMAGE_COLUMNS if column in columns]
    if config.use_vllm and generation_backend is None and not rollout_func and images:
        raise ValueError(
            f"the training data has an {images[0]!r} column, but MaxEntGRPOTrainer's vLLM backends send prompts as "
            "text only (the images would be left out without a word): train with use_vllm=False (the transformers "
            "backend passes them to the model) or a generation_backend of your own."
        )
    weight_transfer = agreed_weight_transfer(config)
    if (problem := vllm_install_problem(config, weight_transfer)) is not None:
        raise VLLMMissingError(problem)
    if config.async_generation and config.vllm_weight_transfer == "auto" and weight_transfer == "nccl":
        raise ValueError(
            "async_generation=True needs vllm_weight_transfer='disk' (here 'auto' follows a server that serves NCCL, "
            "which does not version the weights): set vllm_weight_transfer to 'disk' and start the server with "
            "--weight-transfer disk"
        )
    return weight_transfer


def generation_span(args: Any) -> int:
    """Optimizer steps one generation batch is trained over: ``num_iterations`` windows where a generation covers
    whole windows (``steps_per_generation * num_iterations`` a multiple of ``gradient_accumulation_steps``), else 1
    (several generations in one window). Raises ValueError where generations and windows do not line up."""
    generate_every, window = args.steps_per_generation * args.num_iterations, args.gradient_accumulation_steps
    if generate_every % window and window % generate_every:
        raise ValueError(
            f"async_generation=True needs generations that line up with optimizer steps: steps_per_generation * "
            f"num_iterations ({generate_every}) a multiple or a divisor of gradient_accumulation_steps ({window})."
        )
    return max(generate_every // window, 1)


def check_async_generation(args: Any, *, own_backend: bool, tools: bool) -> None:
    """Refuse ``async_generation`` where it cannot hold its guarantees (the config refused what its fields decide
    alone, ``vllm_weight_transfer='nccl'`` among them: `MaxEntGRPOConfig._validate_async_generation`).

    Raises:
        ValueError: with a user's own backend or a ``rollout_func`` (neither tags completions with weight versions nor
            is known to be safe to call from a second thread), with tools or environments (an episode's turns are
            collective rounds, which must stay on the main thread), with generations that do not line up with
            optimizer steps or are trained over more steps than ``max_staleness`` allows (``'auto'`` following a
            server that serves NCCL is refused by `check_combinations`, once the server has been asked).
    """
    if own_backend:
        raise ValueError(
            "async_generation=True needs the built-in vLLM server backend: a `generation_backend` of your own or a "
            "`rollout_func` does not report the weight version of its completions."
        )
    if tools:
        raise ValueError("async_generation=True is not supported with `tools` or `environment_factory`.")
    span = generation_span(args)
    if span > args.max_staleness:
        raise ValueError(
            f"async_generation=True with max_staleness={args.max_staleness}: each generation batch is trained over "
            f"{span} optimizer steps (num_iterations={args.num_iterations}), so rows generated a step ahead are "
            f"{span} steps old when last trained on; set max_staleness >= {span}."
        )
