"""`FinishStagedWeights`: the trainer's wait, before each optimizer step, for weights still written behind the step.

With ``async_generation`` and the disk transport, the server backend writes the files of each new weight version on a
thread of its own while the window's forward and backward passes run (`SupportsWriteBehind`), reading the live
parameters. The optimizer step is the first thing that changes them, so the trainer waits for the write there, on
every process (Transformers' ``on_pre_optimizer_step``, after gradient clipping, right before ``optimizer.step()``),
and at the end of each epoch (``on_epoch_end``: a run stopped mid-window by a callback, before the best model is
loaded into the parameters).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback

from maxent_grpo.training.generation.contract.capabilities import SupportsWriteBehind
from maxent_grpo.training.generation.contract.protocol import GenerationBackend


class FinishStagedWeights(TrainerCallback):
    """Calls ``finish_staged_weights()`` on the trainer's backend before each optimizer step and at the end of each
    epoch, where it has one.

    Args:
        backend: the trainer's generation backend, as it is at each step.
    """

    def __init__(self, backend: Callable[[], GenerationBackend]) -> None:
        self._backend = backend

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._finish()

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._finish()

    def _finish(self) -> None:
        backend = self._backend()
        if isinstance(backend, SupportsWriteBehind):
            backend.finish_staged_weights()
