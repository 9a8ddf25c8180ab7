"""Generation backends: one module per backend, plus the protocol they share."""

from maxent_grpo.training.generation.backends.protocol import Completion, GenerationBackend
from maxent_grpo.training.generation.backends.transformers_backend import TransformersBackend
from maxent_grpo.training.generation.backends.vllm_colocate import VLLMColocateBackend
from maxent_grpo.training.generation.backends.vllm_server import VLLMServerBackend

__all__ = ["Completion", "GenerationBackend", "TransformersBackend", "VLLMColocateBackend", "VLLMServerBackend"]
