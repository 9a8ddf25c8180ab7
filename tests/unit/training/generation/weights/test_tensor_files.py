"""`ShardWriter`: safetensors files streamed one tensor at a time, read back by safetensors itself, whatever the
dtypes and however large the header grows past its reservation."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from maxent_grpo.training.generation.weights.tensor_files import DTYPE_NAMES, ShardWriter


def test_tensors_of_every_dtype_round_trip_with_the_metadata(tmp_path: Path):
    tensors = {
        f"t.{str(dtype).removeprefix('torch.')}": (torch.arange(7) % 2).to(dtype).reshape(7, 1)
        for dtype in DTYPE_NAMES
    }
    tensors["empty"] = torch.zeros(0, 3)
    tensors["strided"] = torch.arange(12.0).reshape(3, 4).t()  # not contiguous
    writer = ShardWriter(tmp_path / "a.safetensors", metadata={"base": "1-run"})
    for name, tensor in tensors.items():
        writer.add(name, tensor)
    writer.finish()
    loaded = load_file(tmp_path / "a.safetensors")
    assert loaded.keys() == tensors.keys()
    assert all(loaded[n].dtype == t.dtype and torch.equal(loaded[n], t) for n, t in tensors.items())
    with safe_open(str(tmp_path / "a.safetensors"), "pt") as handle:
        assert handle.metadata() == {"base": "1-run"}


def test_a_header_that_outgrows_its_reservation_is_rewritten_in_front(tmp_path: Path):
    writer = ShardWriter(tmp_path / "b.safetensors", reserve=64)
    tensors = {f"layer.{k}.a_rather_long_parameter_name": torch.full((3,), float(k)) for k in range(20)}
    for name, tensor in tensors.items():
        writer.add(name, tensor)
    length = writer.finish()
    assert length > 64 and length % 8 == 0  # what the next file reserves
    loaded = load_file(tmp_path / "b.safetensors")
    assert all(torch.equal(loaded[n], t) for n, t in tensors.items())
    assert [p.name for p in tmp_path.iterdir()] == ["b.safetensors"]


def test_a_name_given_twice_and_an_unstorable_dtype_are_refused(tmp_path: Path):
    writer = ShardWriter(tmp_path / "c.safetensors")
    writer.add("w", torch.ones(2))
    with pytest.raises(ValueError, match="given twice"):
        writer.add("w", torch.ones(2))
    with pytest.raises(ValueError, match="cannot store"):
        writer.add("z", torch.ones(2, dtype=torch.complex64))
    writer.abandon()


def test_fits_keeps_a_file_within_its_limit(tmp_path: Path):
    writer = ShardWriter(tmp_path / "d.safetensors")
    assert writer.fits(torch.ones(100), 16)  # a first tensor always fits
    writer.add("w", torch.ones(2))  # 8 bytes
    assert writer.fits(torch.ones(2), 16) and not writer.fits(torch.ones(3), 16)
    writer.finish()
