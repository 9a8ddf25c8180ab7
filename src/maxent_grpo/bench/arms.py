"""The trainers a benchmark compares: each arm is a trainer class, its config class and the config fields it adds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trl import GRPOConfig, GRPOTrainer

from maxent_grpo.config import MaxEntGRPOConfig
from maxent_grpo.trainer import MaxEntGRPOTrainer


@dataclass(frozen=True)
class Arm:
    name: str
    description: str
    trainer_class: type[GRPOTrainer]
    config_class: type[GRPOConfig]
    config_fields: dict[str, Any] = field(default_factory=dict)

    @property
    def trainer_path(self) -> str:
        """The trainer class's import path, as recorded with every run."""
        return f"{self.trainer_class.__module__}.{self.trainer_class.__qualname__}"


ARMS: dict[str, Arm] = {
    "before": Arm("before", "TRL's stock GRPOTrainer", GRPOTrainer, GRPOConfig),
    "after": Arm(
        "after",
        "MaxEntGRPOTrainer with TRL's GRPO objective",
        MaxEntGRPOTrainer,
        MaxEntGRPOConfig,
        {"maxent_objective": "grpo"},
    ),
    "listwise": Arm(
        "listwise",
        "MaxEntGRPOTrainer with the MaxEnt listwise objective",
        MaxEntGRPOTrainer,
        MaxEntGRPOConfig,
        {"maxent_objective": "listwise"},
    ),
}
