"""`RunSpec`: what one benchmark run trains and how it is recorded, passed from the runner to its worker as JSON."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from maxent_grpo.bench.recipes import Recipe


@dataclass(frozen=True)
class RunSpec:
    """What one run trains and how it is recorded in trackio.

    Attributes:
        arm: a key of `ARMS`.
        seed: the training seed (and the tiny model's initialisation seed).
        recipe: the set-up shared by every arm.
        project: the trackio project.
        run_name: the trackio run name.
        metadata: added to the trackio run's config (arm, trainer class, version, commit, seed, recipe hash, ...).
    """

    arm: str
    seed: int
    recipe: Recipe
    project: str
    run_name: str
    metadata: dict[str, Any]

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        fields = json.loads(text)
        return cls(**{**fields, "recipe": Recipe(**fields["recipe"])})
