"""The combinations of a trainer's arguments it refuses before anything is loaded, each with one clear line.

The config checks what its fields decide alone (`MaxEntGRPOConfig`); these need the trainer's other arguments too (its
backend, ``tools``, ``environment_factory``, ``rollout_func``, the training data).
"""

from __future__ import annotations

from typing import Any

from maxent_grpo.training.generation.async_generation import check_async_generation

IMAGE_COLUMNS = ("image", "images")


def check_combinations(config: Any, generation_backend: Any, trainer_kwargs: dict[str, Any]) -> None:
    """Raise ValueError for a combination `MaxEntGRPOTrainer` does not support (see each message)."""
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
