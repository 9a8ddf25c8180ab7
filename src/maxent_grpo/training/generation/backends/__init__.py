"""Generation backends: what a trainer is given or builds, one module per backend, and the table that selects the
built-in one (`selection`). The protocol they implement is in `contract`; its main names are re-exported here."""

from maxent_grpo.training.generation.backends.transformers_backend import TransformersBackend
from maxent_grpo.training.generation.backends.vllm_colocate import VLLMColocateBackend
from maxent_grpo.training.generation.backends.vllm_server import VLLMServerBackend
from maxent_grpo.training.generation.contract.protocol import Completion, GenerationBackend, TokenPrompt
from maxent_grpo.training.generation.contract.sampling import SamplingSettings

__all__ = [
    "Completion",
    "GenerationBackend",
    "SamplingSettings",
    "TokenPrompt",
    "TransformersBackend",
    "VLLMColocateBackend",
    "VLLMServerBackend",
]
