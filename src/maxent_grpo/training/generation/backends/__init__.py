"""Generation backends: one module per backend, the protocol and sampling settings they share, and the table that
selects the built-in one (`selection`)."""

from maxent_grpo.training.generation.backends.protocol import Completion, GenerationBackend, TokenPrompt
from maxent_grpo.training.generation.backends.sampling import SamplingSettings
from maxent_grpo.training.generation.backends.transformers_backend import TransformersBackend
from maxent_grpo.training.generation.backends.vllm_colocate import VLLMColocateBackend
from maxent_grpo.training.generation.backends.vllm_server import VLLMServerBackend

__all__ = [
    "Completion",
    "GenerationBackend",
    "SamplingSettings",
    "TokenPrompt",
    "TransformersBackend",
    "VLLMColocateBackend",
    "VLLMServerBackend",
]
