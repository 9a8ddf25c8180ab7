"""The protocol's former path, kept for one release: use `maxent_grpo.training.generation.contract.protocol`.

Custom backends that import `GenerationStopped` or `BackendContractError` from here keep working; the names are the
same objects.
"""

from maxent_grpo.training.generation.contract.protocol import (
    BackendContractError,
    Completion,
    GenerationBackend,
    GenerationStopped,
    TokenPrompt,
)

__all__ = ["BackendContractError", "Completion", "GenerationBackend", "GenerationStopped", "TokenPrompt"]
