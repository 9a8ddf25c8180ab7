"""maxent-grpo: GRPO for TRL with robust generation backends and a maximum-entropy listwise objective.

The public names are imported lazily (PEP 562), so that light submodules such as
``maxent_grpo.training.generation.helpers`` load without importing torch, transformers and TRL. Importing the
package silences transformers' and TRL's deprecation notices about each other (see `upstream_warnings`).
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from maxent_grpo.upstream_warnings import ignore_upstream_deprecations

ignore_upstream_deprecations()

try:
    __version__ = version("maxent-grpo")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0"

_EXPORTS = {
    "MaxEntGRPOConfig": "maxent_grpo.config",
    "MaxEntGRPOTrainer": "maxent_grpo.trainer",
    "Completion": "maxent_grpo.training.generation.contract.protocol",
    "GenerationBackend": "maxent_grpo.training.generation.contract.protocol",
    "SamplingSettings": "maxent_grpo.training.generation.contract.sampling",
    "TokenPrompt": "maxent_grpo.training.generation.contract.protocol",
    "TransformersBackend": "maxent_grpo.training.generation.backends.transformers_backend",
    "VLLMColocateBackend": "maxent_grpo.training.generation.backends.vllm_colocate",
    "VLLMServerBackend": "maxent_grpo.training.generation.backends.vllm_server",
}

__all__ = [
    "Completion",
    "GenerationBackend",
    "MaxEntGRPOConfig",
    "MaxEntGRPOTrainer",
    "SamplingSettings",
    "TokenPrompt",
    "TransformersBackend",
    "VLLMColocateBackend",
    "VLLMServerBackend",
    "__version__",
]

if TYPE_CHECKING:
    from maxent_grpo.config import MaxEntGRPOConfig
    from maxent_grpo.trainer import MaxEntGRPOTrainer
    from maxent_grpo.training.generation.backends import (
        Completion,
        GenerationBackend,
        SamplingSettings,
        TokenPrompt,
        TransformersBackend,
        VLLMColocateBackend,
        VLLMServerBackend,
    )


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'maxent_grpo' has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
