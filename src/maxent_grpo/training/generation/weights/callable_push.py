"""`CallablePush`: the training weights pushed by a callable of your own (``VLLMServerBackend``'s ``weight_sync``).

The callable takes no arguments and reaches the model itself; it keeps no versions, so a server that restarts is
not given the weights again by this package.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from maxent_grpo.training.generation.weights.transfer import WeightTransfer


class CallablePush(WeightTransfer):
    """Push the training weights by calling ``push()`` (on every process, as often as the trainer syncs).

    Args:
        push: the push, taking no arguments.
    """

    def __init__(self, push: Callable[[], None]) -> None:
        self.push = push

    def write(self, model: torch.nn.Module) -> None:
        """Call the push (``model`` is the one it reaches by itself)."""
        self.push()
