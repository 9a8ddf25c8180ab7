"""The gradient of an optimizer window, finished before clipping and the optimizer step (invariant I6).

A window is the micro-batches one optimizer step accumulates. A window in which no process held a kept row in any
micro-batch gets no gradient at all, so the optimizer changes no parameter (no momentum or weight-decay step
either). Otherwise, for the loss types TRL normalises per micro-batch, the gradient becomes the mean over the
(process, micro-batch) units that held kept rows (TRL's own mean over micro-batches and processes when nothing is
dropped): a unit without data would otherwise count as a zero and shrink the step. dapo, cispo and vespo are
normalised by the window's kept token count already.
"""

from __future__ import annotations

import torch

#: TRL loss types whose normaliser is per micro-batch (rows, or tokens for bnpo).
PER_MICRO_BATCH_LOSSES = frozenset({"grpo", "bnpo", "dr_grpo", "sapo", "luspo"})


class OptimizerWindow:
    """Counts, over one optimizer window, the (process, micro-batch) units that held a kept row."""

    def __init__(self, loss_type: str) -> None:
        self.loss_type = loss_type
        self.units = 0

    def add(self, units: int) -> None:
        """Count ``units`` more (process, micro-batch) pairs with kept rows (the same on every process)."""
        self.units += units

    @property
    def empty(self) -> bool:
        """No unit of the window so far held a kept row."""
        return self.units == 0

    def close(self, model: torch.nn.Module, *, num_processes: int, accumulation_steps: int) -> None:
        """Finish the window's gradient (see the module docstring) and start a new window."""
        units, self.units = self.units, 0
        parameters = list(model.parameters())
        if units == 0:
            for parameter in parameters:
                parameter.grad = None
            return
        if self.loss_type not in PER_MICRO_BATCH_LOSSES:
            return
        factor = num_processes * accumulation_steps / units
        if factor != 1.0:
            for parameter in parameters:
                if parameter.grad is not None:
                    parameter.grad.mul_(factor)
