"""`NoTransfer`: no way to update the server: it keeps the weights it was started with (off-policy generation)."""

from __future__ import annotations

import logging

import torch

from maxent_grpo.training.generation.weights.transfer import WeightTransfer

logger = logging.getLogger(__name__)


class NoTransfer(WeightTransfer):
    """The server at ``base_url`` keeps its launch weights: every completion comes from that fixed policy, which the
    first `write` warns about, once.

    Args:
        base_url: the server's root URL, named in the warning.
    """

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self._warned = False

    def write(self, model: torch.nn.Module) -> None:
        """Leave the server's weights alone (warned once)."""
        if self._warned:
            return
        self._warned = True
        logger.warning(
            "VLLMServerBackend has no weights_directory, weight_sync or weight_transfer: the server keeps its own "
            "weights: generation is off-policy (completions come from the model the server at %s was started with).",
            self.base_url,
        )
