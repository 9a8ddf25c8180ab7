"""The collective operations the generation step and the listwise objective need, as one small value.

Both run on every process at the same points (invariant I7), and both are tested without a trainer or a process
group: `Collectives.of` takes them from an `accelerate.Accelerator`, `Collectives.single` is one process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


def _same_list(values: list[Any]) -> list[Any]:
    return list(values)


@dataclass(frozen=True)
class Collectives:
    """Collectives of one process group; every process calls them in the same order.

    Attributes:
        process_index: this process's rank.
        device: where tensors handed to ``gather`` live (the backend of the process group decides).
        gather: concatenates a tensor along dim 0 over processes, in process order (identity with one process).
        gather_object: concatenates a list of picklable values over processes, in process order.
    """

    process_index: int
    device: torch.device
    gather: Callable[[torch.Tensor], torch.Tensor]
    gather_object: Callable[[list[Any]], list[Any]] = _same_list

    @classmethod
    def of(cls, accelerator: Any) -> Collectives:
        """The collectives of an `accelerate.Accelerator`."""
        from accelerate.utils import gather_object

        return cls(accelerator.process_index, accelerator.device, accelerator.gather, gather_object)

    @classmethod
    def single(cls, device: torch.device | str = "cpu") -> Collectives:
        """One process: every gather returns its input."""
        return cls(0, torch.device(device), lambda tensor: tensor)

    def any(self, flag: bool) -> bool:
        """True when ``flag`` is True on any process."""
        return bool(self.gather(torch.tensor([int(flag)], device=self.device)).any())
