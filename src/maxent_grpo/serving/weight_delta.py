"""Delta weight versions: only the tensors, or the elements, that changed since the version the server holds.

Between two optimizer steps many weights do not change at all bit for bit: frozen layers, the unmerged base of a
LoRA model, and, in 16-bit weights, most elements of every tensor (an update below half a unit in the last place
rounds away). A delta names its base version and holds, per tensor, one of:

- nothing: the tensor is bit-identical to the base's;
- ``<name>.delta_index`` (int32, or int64 past 2**31 elements) and ``<name>.delta_value``: the flat positions whose
  bits changed and their new values, when that is smaller than the tensor;
- ``<name>``: the whole new tensor.

Equality is bitwise (a NaN equal to itself, ``0.0`` and ``-0.0`` told apart), so applying a delta to its base gives
back the new tensors exactly. Both sides keep the base as a host copy of every tensor (`DeltaSource` on the process
that writes versions, `apply_delta` on the server's copy): the memory of one more copy of the weights each, in the
dtype they are written in. Pure torch; the server's worker extension imports it too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import torch

INDEX_SUFFIX = ".delta_index"
VALUE_SUFFIX = ".delta_value"
#: ``__metadata__`` keys of a delta file: its format, its base version and its own version.
FORMAT_KEY, BASE_KEY, VERSION_KEY = "maxent_delta", "base", "version"
FORMAT = "1"
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def changed_positions(old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """The flat positions where ``new``'s bits differ from ``old``'s (both contiguous on the host, one shape and
    dtype), as int32, or int64 for tensors past 2**31 elements."""
    bits = _BITS[new.element_size()]
    differ = old.reshape(-1).view(bits) != new.reshape(-1).view(bits)
    index_dtype = torch.int32 if new.numel() < 2**31 else torch.int64
    return differ.nonzero().reshape(-1).to(index_dtype)


@dataclass
class DeltaStats:
    """What one version written against a base held: tensors unchanged, sent sparse, sent whole; bytes."""

    unchanged: int = 0
    sparse: int = 0
    whole: int = 0
    delta_bytes: int = 0
    full_bytes: int = 0


@dataclass
class DeltaSource:
    """The pushing process's copy of the last version written (`values`, named `version`), and the deltas from it.

    `entries` yields, for one new version's tensors, what its delta holds (module docstring) and brings `values` up
    to the new version as it goes; `stats` then says what it held. Against a base, a walk whose tensors are not the
    base's (a name the base lacks, another shape or dtype, or a name of the base left out) cannot be a delta: the
    walk is still taken into `values` to its end, and `whole_needed` tells the writer to write `values` whole
    instead of what was yielded.
    """

    values: dict[str, torch.Tensor] = field(default_factory=dict)
    version: str | None = None
    stats: DeltaStats = field(default_factory=DeltaStats)
    whole_needed: bool = False

    @property
    def nbytes(self) -> int:
        """Bytes of the host copy."""
        return sum(t.numel() * t.element_size() for t in self.values.values())

    def entries(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
        """The delta of ``named_tensors`` against `values`, which become the new tensors; counted in `stats`.
        With `values` empty (no base), every tensor is yielded whole."""
        self.stats = stats = DeltaStats()
        against_base, self.whole_needed = bool(self.values), False
        seen: set[str] = set()
        for name, tensor in named_tensors:
            seen.add(name)
            new = tensor.detach().to("cpu").contiguous()
            stats.full_bytes += new.numel() * new.element_size()
            old = self.values.get(name)
            fits = old is not None and old.shape == new.shape and old.dtype == new.dtype
            self.whole_needed |= against_base and not fits
            if self.whole_needed or not fits:
                self.values[name] = new.clone() if new.data_ptr() == tensor.data_ptr() else new
                stats.whole += 1
                stats.delta_bytes += new.numel() * new.element_size()
                if not against_base:
                    yield name, new
                continue
            assert old is not None
            index = changed_positions(old, new)
            sparse_bytes = index.numel() * (index.element_size() + new.element_size())
            if index.numel() == 0:
                stats.unchanged += 1
            elif sparse_bytes < new.numel() * new.element_size():
                positions = index.long()
                values = new.reshape(-1)[positions]
                old.view(-1)[positions] = values
                stats.sparse += 1
                stats.delta_bytes += sparse_bytes
                yield f"{name}{INDEX_SUFFIX}", index
                yield f"{name}{VALUE_SUFFIX}", values
            else:
                old.copy_(new)
                stats.whole += 1
                stats.delta_bytes += new.numel() * new.element_size()
                yield name, new
        for name in set(self.values) - seen:  # left out of this walk: not part of the version
            del self.values[name]
            self.whole_needed |= against_base


def apply_delta(base: dict[str, torch.Tensor], delta: Mapping[str, torch.Tensor]) -> list[str]:
    """Bring ``base`` (name -> tensor, changed in place) to the version ``delta`` describes; return the names it
    changed. A whole tensor of ``delta`` is taken over, not copied.

    Raises:
        ValueError: an entry for a tensor ``base`` does not hold, of another shape or dtype, a position past its end,
            or an index without its values; ``base`` may then be left partly updated (the caller drops it).
    """
    changed = []
    for key, tensor in delta.items():
        if key.endswith(VALUE_SUFFIX):
            continue
        if key.endswith(INDEX_SUFFIX):
            name = key[: -len(INDEX_SUFFIX)]
            values = delta.get(f"{name}{VALUE_SUFFIX}")
            target = base.get(name)
            if values is None or target is None:
                raise ValueError(f"delta entry {key!r} has no values or no tensor {name!r} to apply to")
            if values.dtype != target.dtype or values.numel() != tensor.numel():
                raise ValueError(f"delta values of {name!r} do not fit it ({values.dtype}, {values.numel()} values)")
            flat = target.view(-1)
            if tensor.numel() and (int(tensor.min()) < 0 or int(tensor.max()) >= flat.numel()):
                raise ValueError(
                    f"delta of {name!r} names positions {int(tensor.min())} to {int(tensor.max())} of {flat.numel()}"
                )
            flat[tensor.long()] = values
        else:
            name = key
            target = base.get(name)
            if target is None:
                raise ValueError(f"delta tensor {name!r} is not in the base")
            if target.shape != tensor.shape or target.dtype != tensor.dtype:
                raise ValueError(
                    f"delta tensor {name!r} is {tensor.dtype} {list(tensor.shape)}, the base holds "
                    f"{target.dtype} {list(target.shape)}"
                )
            base[name] = tensor
        changed.append(name)
    return changed
