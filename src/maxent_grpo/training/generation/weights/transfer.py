"""`WeightTransfer`: how the training weights reach one vLLM server, the one interface the server backend calls.

One type per transfer: the disk transfer (`server_sync.ServerWeightSync`, versions a server is checked to serve),
TRL's NCCL push (`nccl.NCCLTransfer`), a push of the user's own (`callable_push.CallablePush`) and none
(`no_transfer.NoTransfer`, the server keeps its launch weights). `VLLMServerBackend` picks one when it is built.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch


class WeightTransfer(ABC):
    """How the training weights reach one vLLM server. A transfer without versions (every one but the disk's) writes
    nothing ahead: what `stage` is given, `publish` writes, and the server always counts as serving the trainer's
    weights.

    Attributes:
        version: the version of the training weights the server must serve before it generates; None where the
            transfer keeps no versions, or before the first `write`.
    """

    version: str | None = None
    _staged_model: torch.nn.Module | None = None

    @abstractmethod
    def write(self, model: torch.nn.Module) -> None:
        """Make ``model``'s weights the ones the server must serve (called on every process)."""

    def stage(self, model: torch.nn.Module) -> None:
        """Make ``model``'s weights the next ones, while a generation call from the weights before may still be in
        flight; `publish` makes them the server's."""
        self._staged_model = model

    def publish(self) -> None:
        """Make the weights `stage` was given the ones the server must serve (no call may be in flight)."""
        model, self._staged_model = self._staged_model, None
        if model is not None:
            self.write(model)

    def finish_staged(self) -> None:
        """Wait for what `stage` still writes behind the training step (only the disk transfer writes behind)."""
        return None

    def adopt(self, version: str) -> None:
        """Take ``version``, written by another transfer of this process, as the one the server must serve."""
        raise ValueError(f"{type(self).__name__} keeps no weight versions: only the disk transfer adopts one")

    def ensure(self, wait: bool = True) -> bool:
        """Whether the server serves the trainer's weights, pushed first where needed (False: generate nothing).
        ``wait`` False: a call with no prompt, which waits for no other process's push."""
        return True

    def still_serves(self) -> bool:
        """Whether the server still serves the trainer's weights (asked after a generation call)."""
        return True
