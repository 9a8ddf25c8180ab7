"""Safetensors files written in one pass, each tensor's bytes straight from its memory.

safetensors' own writer (``safetensors.torch.save_file``) needs every tensor of a file at once and turns each one
into a Python ``bytes`` object before writing it: a weight version written with it is held in memory twice over (the
copies of the tensors, then their bytes), and a walk that frees each gathered tensor (ZeRO-3, FSDP) has to copy all
of them first. `ShardWriter` writes the same format tensor by tensor, as a walk yields them: the data goes at an
offset reserved for the header, which is written last, padded with spaces to fill the reservation (the format allows
the padding); a header that outgrew its reservation makes the file be written once more behind a larger one. A CPU
tensor is written from its own memory, one on an accelerator through one copy to the host.

The files are read by safetensors (``safe_open``, ``load_file``) like any other.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path
from typing import IO

import torch

#: safetensors' name of each dtype a weight can have.
DTYPE_NAMES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
    torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e5m2: "F8_E5M2",
}
#: Bytes reserved for a file's header before its first tensor (grown for the next file when one outgrows it).
HEADER_RESERVE = 16 << 10
_LENGTH = struct.Struct("<Q")


def tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """The bytes of ``tensor`` (detached, contiguous, on the host; a view of its own memory when it already is)."""
    host = tensor.detach()
    if host.device.type != "cpu":
        host = host.to("cpu")
    host = host.contiguous().reshape(-1)
    return memoryview(host.view(torch.uint8).numpy())


class ShardWriter:
    """One safetensors file under construction at ``path``: `add` tensors in order, then `finish`.

    Args:
        path: the file to write (created or truncated).
        reserve: bytes reserved for the header (a multiple of 8).
        metadata: the file's ``__metadata__`` (string keys and values), or None.
    """

    def __init__(self, path: Path, *, reserve: int = HEADER_RESERVE, metadata: dict[str, str] | None = None) -> None:
        self.path = path
        self.reserve = reserve
        self.metadata = metadata
        self.entries: dict[str, dict[str, object]] = {}
        self.nbytes = 0
        self._file: IO[bytes] = open(path, "wb")  # noqa: SIM115 (closed by finish or abandon)
        self._file.seek(_LENGTH.size + reserve)

    def fits(self, tensor: torch.Tensor, limit: int) -> bool:
        """Whether ``tensor`` keeps this file within ``limit`` bytes (a first tensor always fits)."""
        return not self.entries or self.nbytes + tensor.numel() * tensor.element_size() <= limit

    def add(self, name: str, tensor: torch.Tensor) -> None:
        """Append ``tensor`` under ``name``.

        Raises:
            ValueError: a name already in the file, or a dtype safetensors has no name for.
        """
        if name in self.entries:
            raise ValueError(f"tensor {name!r} given twice")
        if tensor.dtype not in DTYPE_NAMES:
            raise ValueError(f"tensor {name!r} has dtype {tensor.dtype}, which safetensors cannot store")
        data = tensor_bytes(tensor)
        self._file.write(data)
        start, self.nbytes = self.nbytes, self.nbytes + data.nbytes
        self.entries[name] = {
            "dtype": DTYPE_NAMES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [start, self.nbytes],
        }

    def finish(self) -> int:
        """Write the header and close the file; return the header's length (what the next file may reserve)."""
        header: dict[str, object] = dict(self.entries)
        if self.metadata:
            header["__metadata__"] = dict(self.metadata)
        encoded = json.dumps(header, separators=(",", ":")).encode()
        length = len(encoded) + (-len(encoded) % 8)
        if length <= self.reserve:
            self._file.seek(0)
            self._file.write(_LENGTH.pack(self.reserve) + encoded.ljust(self.reserve, b" "))
            self._file.close()
            return length
        self._rewrite_behind(encoded.ljust(length, b" "))
        return length

    def abandon(self) -> None:
        """Close the file, unfinished (its directory is about to be removed)."""
        self._file.close()

    def _rewrite_behind(self, header: bytes) -> None:
        """The header outgrew its reservation: copy the data into a new file behind the whole header."""
        self._file.close()
        moved = self.path.with_name(f"{self.path.name}.moving")
        with open(self.path, "rb") as old, open(moved, "wb") as new:
            new.write(_LENGTH.pack(len(header)) + header)
            old.seek(_LENGTH.size + self.reserve)
            shutil.copyfileobj(old, new, 1 << 22)
        os.replace(moved, self.path)
