"""maxent-grpo: GRPO for TRL with robust generation backends and a maximum-entropy listwise objective."""

from importlib.metadata import PackageNotFoundError, version

from maxent_grpo.config import MaxEntGRPOConfig
from maxent_grpo.trainer import MaxEntGRPOTrainer
from maxent_grpo.training.generation.backends import (
    Completion,
    GenerationBackend,
    TransformersBackend,
    VLLMColocateBackend,
    VLLMServerBackend,
)

try:
    __version__ = version("maxent-grpo")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0"

__all__ = [
    "Completion",
    "GenerationBackend",
    "MaxEntGRPOConfig",
    "MaxEntGRPOTrainer",
    "TransformersBackend",
    "VLLMColocateBackend",
    "VLLMServerBackend",
    "__version__",
]
