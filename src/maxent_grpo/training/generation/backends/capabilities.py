"""The capabilities' former path, kept for one release: use `maxent_grpo.training.generation.contract.capabilities`.

The names are the same objects, so ``isinstance`` checks against either path agree.
"""

from maxent_grpo.training.generation.contract.capabilities import (
    SupportsCancel,
    SupportsContextLength,
    SupportsDeadline,
    SupportsFailureReasons,
    SupportsSamplerLogprobs,
    SupportsStats,
    SupportsTokenPrompts,
    SupportsWeightStaging,
    SupportsWeightSync,
    SupportsWeightVersion,
    check_backend,
)

__all__ = [
    "SupportsCancel",
    "SupportsContextLength",
    "SupportsDeadline",
    "SupportsFailureReasons",
    "SupportsSamplerLogprobs",
    "SupportsStats",
    "SupportsTokenPrompts",
    "SupportsWeightStaging",
    "SupportsWeightSync",
    "SupportsWeightVersion",
    "check_backend",
]
