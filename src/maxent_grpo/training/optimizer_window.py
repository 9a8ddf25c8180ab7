"""The correction that keeps dropped rows out of an optimizer step, applied to each micro-batch's loss (I6, I10).

An optimizer window is the micro-batches one optimizer step accumulates. TRL normalises each micro-batch's loss as if
every micro-batch held data, so a micro-batch whose rows were all dropped would count as a zero and shrink the step.
The correction is therefore a factor on each micro-batch's loss, and it has to be known *before* that micro-batch's
backward: DeepSpeed steps its engine inside the backward of a window's last micro-batch (accelerate's
`DeepSpeedEngineWrapper.backward`), so a gradient fixed after the last backward would come too late, and FSDP and DDP
reduce gradients during backward too. Weights do not change inside a window, so the trainer generates all of a
window's generation batches at its first micro-batch (what TRL would generate later in the window, from the same
weights and the same inputs) and plans the whole window from their keep masks, with one gather.

With ``P`` processes and a window of ``M`` micro-batches, ``U`` of the ``P * M`` (process, micro-batch) units holding
a kept row, the factors are (`WindowPlan.factors`):

- grpo, bnpo, dr_grpo, sapo, luspo (normalised per micro-batch, then averaged over the window's ``P * M`` units):
  ``P * M / U``, the mean over the units that hold data;
- dapo, cispo, vespo (normalised by the kept tokens of their generation batch, ``num_items_in_batch``): ``M / K``,
  ``K`` the window's micro-batches whose generation batch holds any kept token (only below 1 when a window spans
  several generation batches, ``steps_per_generation < gradient_accumulation_steps``, and one of them was dropped);
- TRL's entropy bonus (``entropy_coef``; a per-micro-batch mean whatever the loss type): ``P * M / U``.

A window with no kept row on any process (``U == 0``, the same decision on every process) runs no forward and no
backward at all, so no engine steps: no parameter, momentum or weight-decay change under DDP, DeepSpeed or FSDP alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

#: TRL loss types whose normaliser is per micro-batch (rows, or tokens for bnpo).
PER_MICRO_BATCH_LOSSES = frozenset({"grpo", "bnpo", "dr_grpo", "sapo", "luspo"})


@dataclass(frozen=True)
class WindowPlan:
    """The loss factors of one optimizer window, identical on every process.

    Attributes:
        start: TRL's micro-step counter (``GRPOTrainer._step``) at the window's first micro-batch.
        kept_rows: kept rows of each (process, micro-batch), gathered, [P, M].
        generation_has_data: whether each micro-batch's generation batch holds a kept token anywhere, [M].
        loss_type: TRL's ``loss_type``.
    """

    start: int
    kept_rows: torch.Tensor
    generation_has_data: list[bool]
    loss_type: str

    @classmethod
    def of(
        cls,
        start: int,
        micro_batches: Sequence[dict[str, Any]],
        *,
        keep_key: str,
        loss_type: str,
        gather: Callable[[torch.Tensor], torch.Tensor],
        device: torch.device,
    ) -> WindowPlan:
        """The plan of the window whose prepared micro-batches are ``micro_batches`` (one gather: a collective)."""
        local = torch.tensor([int(batch[keep_key].sum()) for batch in micro_batches], device=device)
        kept_rows = gather(local.unsqueeze(0)).cpu()
        generation_has_data = [bool(batch["num_items_in_batch"] > 0) for batch in micro_batches]
        return cls(start, kept_rows, generation_has_data, loss_type)

    @property
    def size(self) -> int:
        """M, the window's micro-batches."""
        return len(self.generation_has_data)

    def holds(self, step: int) -> bool:
        """Whether TRL's micro-step ``step`` belongs to this window."""
        return self.start <= step < self.start + self.size

    @property
    def empty(self) -> bool:
        """No process holds a kept row in any micro-batch of the window."""
        return not bool(self.kept_rows.any())

    def factors(self) -> tuple[float, float]:
        """``(loss factor, entropy-bonus factor)`` for every micro-batch of a window that is not `empty`."""
        units = int((self.kept_rows > 0).sum())
        per_unit = self.kept_rows.numel() / units
        if self.loss_type in PER_MICRO_BATCH_LOSSES:
            return per_unit, per_unit
        with_tokens = sum(self.generation_has_data)
        # Kept rows without a kept token (all masked by `mask_truncated_completions`): TRL's loss is 0 anyway.
        return (self.size / with_tokens if with_tokens else 1.0), per_unit


class WindowPlanner:
    """The trainer's optimizer windows: the inputs of the window to train, its prepared micro-batches and its plan.

    ``prepare(inputs, step)`` is TRL's ``_prepare_inputs`` at micro-step ``step`` (generation included); ``plan_of``
    turns a window's prepared micro-batches into its `WindowPlan` (a collective).
    """

    def __init__(
        self,
        prepare: Callable[[dict[str, Any], int], dict[str, Any]],
        plan_of: Callable[[int, list[dict[str, Any]]], WindowPlan],
    ) -> None:
        self._prepare = prepare
        self._plan_of = plan_of
        self._pending: tuple[int, list] | None = None
        self._prepared: list[dict[str, Any]] = []
        self.plan: WindowPlan | None = None

    def start(self, step: int, window_inputs: list) -> None:
        """A window begins at TRL's micro-step ``step`` with the Trainer's ``window_inputs`` (one per micro-step)."""
        self._pending, self.plan = (step, window_inputs), None

    def inputs_at(self, step: int) -> dict[str, Any] | None:
        """The prepared micro-batch of ``step``, generating and planning the window at its first micro-step; None
        for a step outside a planned window (TRL prepares it itself)."""
        if self._pending is not None and self._pending[0] == step:
            start, window_inputs = self._pending
            self._pending = None
            self._prepared = [self._prepare(inputs, start + offset) for offset, inputs in enumerate(window_inputs)]
            self.plan = self._plan_of(start, self._prepared)
        if self.plan is None or not self.plan.holds(step):
            return None
        return self._prepared[step - self.plan.start]

    @property
    def prepared(self) -> list[dict[str, Any]]:
        """The micro-batches of the window planned last."""
        return self._prepared

    def empty_at(self, step: int) -> bool:
        """``step`` belongs to a planned window without a kept row on any process."""
        return self.plan is not None and self.plan.holds(step) and self.plan.empty

    def factors_at(self, step: int) -> tuple[float, float]:
        """``(loss factor, entropy-bonus factor)`` of ``step`` (1 outside a planned window)."""
        if self.plan is None or not self.plan.holds(step) or self.plan.empty:
            return 1.0, 1.0
        return self.plan.factors()


def step_engine_owned_scheduler(lr_scheduler: Any) -> None:
    """Step the learning-rate schedule that only an engine step would have moved, at an empty window's boundary.

    With a ``scheduler`` section in its DeepSpeed config, the engine owns the schedule and steps it in its own step
    (accelerate's `DeepSpeedSchedulerWrapper.step` does nothing); an empty window runs no backward, so no engine step,
    and the schedule would fall behind the optimizer steps. Any other scheduler is stepped by the Trainer as usual.
    """
    from accelerate.utils.deepspeed import DeepSpeedSchedulerWrapper

    if isinstance(lr_scheduler, DeepSpeedSchedulerWrapper):
        lr_scheduler.scheduler.step()
