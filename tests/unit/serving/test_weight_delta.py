"""Delta weight versions (`weight_delta`, `WeightDirectory` with ``delta=True``): a delta applied to its base gives
the new weights bit for bit, through the files a server reads, whatever changed (single elements, whole tensors,
NaN and signed zeros, 16-bit weights); a delta no smaller than the weights is written whole; a server without the
base gets the whole version."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors import safe_open
from safetensors.torch import load_file

from maxent_grpo.serving.weight_delta import (
    BASE_KEY,
    INDEX_SUFFIX,
    VALUE_SUFFIX,
    DeltaSource,
    apply_delta,
    changed_positions,
)
from maxent_grpo.training.generation.weights.directory import FULL_FOLDER, WeightDirectory

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
SPECIAL = (float("nan"), -0.0, 0.0, float("inf"), float("-inf"))


def bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bit patterns (a bitwise comparison: NaN equals itself, -0.0 differs from 0.0)."""
    return tensor.contiguous().reshape(-1).view({4: torch.int32, 2: torch.int16}[tensor.element_size()])


def same_bits(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(
        a[n].dtype == b[n].dtype and a[n].shape == b[n].shape and torch.equal(bits(a[n]), bits(b[n])) for n in a
    )


def read(folder: Path) -> dict[str, torch.Tensor]:
    loaded: dict[str, torch.Tensor] = {}
    for shard in sorted(folder.glob("*.safetensors")):
        loaded.update(load_file(shard))
    return loaded


@st.composite
def weight_steps(draw: st.DrawFn) -> tuple[dict[str, torch.Tensor], list[dict[str, torch.Tensor]]]:
    """A few named tensors and a few later versions of them, each changing some elements (maybe none, maybe all),
    with NaNs and signed zeros among the values."""
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    sizes = draw(st.lists(st.integers(1, 40), min_size=1, max_size=4))
    base = {
        f"layer{k}.weight": torch.randn(size, generator=generator).to(draw(st.sampled_from(DTYPES)))
        for k, size in enumerate(sizes)
    }
    versions, current = [], base
    for _ in range(draw(st.integers(1, 3))):
        current = {name: tensor.clone() for name, tensor in current.items()}
        for tensor in current.values():
            share = draw(st.sampled_from((0.0, 0.05, 0.5, 1.0)))
            picked = torch.rand(tensor.numel(), generator=generator) < share
            tensor.view(-1)[picked] += torch.randn(int(picked.sum()), generator=generator).to(tensor.dtype)
            if draw(st.booleans()):
                tensor.view(-1)[draw(st.integers(0, tensor.numel() - 1))] = draw(st.sampled_from(SPECIAL))
        versions.append(current)
    return base, versions


@settings(max_examples=60, deadline=None)
@given(weight_steps())
def test_a_delta_applied_to_its_base_gives_the_new_weights_bit_for_bit(steps) -> None:
    base, versions = steps
    source, server = DeltaSource(), {name: tensor.clone() for name, tensor in base.items()}
    list(source.entries(base.items()))  # the first version: the host copy taken
    for version in versions:
        delta = dict(source.entries(version.items()))
        apply_delta(server, delta)
        assert same_bits(server, version)
        assert same_bits(source.values, version)
        stats = source.stats
        assert stats.unchanged + stats.sparse + stats.whole == len(version)
        assert stats.delta_bytes <= stats.full_bytes


@settings(max_examples=25, deadline=None)
@given(weight_steps())
def test_a_server_reading_the_delta_files_holds_what_a_full_push_would_have_given_it(tmp_path_factory, steps) -> None:
    base, versions = steps
    root = tmp_path_factory.mktemp("weights")
    directory, full = WeightDirectory(root / "delta", delta=True), WeightDirectory(root / "full")
    names = [f"{k + 1}-run" for k in range(len(versions) + 1)]
    directory.write(names[0], base.items())
    assert not directory.is_delta(names[0])  # the first version is always whole
    server = read(directory.path(names[0]))
    for name, version in zip(names[1:], versions, strict=True):
        written = directory.write(name, version.items())
        full_version = read(full.write(name, version.items()))
        files = read(written)
        if directory.is_delta(name):
            for shard in written.glob("*.safetensors"):
                with safe_open(str(shard), "pt") as handle:
                    assert handle.metadata()[BASE_KEY] == names[names.index(name) - 1]
            apply_delta(server, files)
        else:  # no smaller than the whole weights: written whole
            server = files
        assert same_bits(server, full_version)
        assert same_bits(read(directory.full_path(name)), full_version)  # what a restarted server is sent


def test_what_a_delta_holds_unchanged_sparse_and_whole_tensors(tmp_path: Path):
    base = {"frozen": torch.ones(64), "nudged": torch.zeros(64), "moved": torch.zeros(4)}
    new = {"frozen": torch.ones(64), "nudged": torch.zeros(64), "moved": torch.arange(4.0)}
    new["nudged"][[3, 17]] = torch.tensor([1.0, -0.0])  # -0.0 differs from 0.0 bit for bit
    directory = WeightDirectory(tmp_path, delta=True)
    directory.write("1-run", base.items())
    written = read(directory.write("2-run", new.items()))
    assert directory.is_delta("2-run")
    assert sorted(written) == ["moved", f"nudged{INDEX_SUFFIX}", f"nudged{VALUE_SUFFIX}"]
    assert written[f"nudged{INDEX_SUFFIX}"].tolist() == [3, 17]
    assert directory.delta is not None and (directory.delta.stats.unchanged, directory.delta.stats.sparse) == (1, 1)
    assert directory.delta_bytes == (64 + 64 + 4) * 4  # the host copy, one more copy of the weights


def test_a_version_in_which_everything_changed_is_written_whole(tmp_path: Path):
    directory = WeightDirectory(tmp_path, delta=True)
    directory.write("1-run", [("w", torch.zeros(8))])
    version = directory.write("2-run", [("w", torch.arange(8.0))])
    assert not directory.is_delta("2-run") and [p.name for p in version.iterdir()] == ["model-00001.safetensors"]
    assert directory.full_path("2-run") == version


def test_the_whole_weights_of_a_delta_that_is_no_longer_the_latest_are_refused(tmp_path: Path):
    directory = WeightDirectory(tmp_path, delta=True)
    weights = torch.zeros(64)
    for k in (1, 2, 3):
        weights[k] = k
        directory.write(f"{k}-run", [("w", weights.clone())])
    assert directory.is_delta("2-run")
    with pytest.raises(LookupError, match="'2-run' are not held any more"):
        directory.full_path("2-run")
    assert (directory.full_path("3-run") / "model-00001.safetensors").is_file()
    assert directory.full_path("3-run") == directory.path("3-run") / FULL_FOLDER


def test_a_failed_write_makes_the_next_version_whole(tmp_path: Path):
    directory = WeightDirectory(tmp_path, delta=True)
    directory.write("1-run", [("w", torch.zeros(64))])

    def failing():
        yield "w", torch.ones(64)
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        directory.write("2-run", failing())
    directory.write("3-run", [("w", torch.ones(64))])
    assert not directory.is_delta("3-run")  # the host copy may hold part of the failed version: not a base


def test_changed_positions_compare_bits():
    old = torch.tensor([0.0, float("nan"), 1.0, 2.0])
    new = torch.tensor([-0.0, float("nan"), 1.0, 3.0])
    assert changed_positions(old, new).tolist() == [0, 3]


def test_a_delta_for_a_tensor_the_base_lacks_is_refused():
    with pytest.raises(ValueError, match="not in the base"):
        apply_delta({"a": torch.zeros(2)}, {"b": torch.zeros(2)})
    for position in (9, -1):  # past the end, or before the start (an index that would wrap around)
        with pytest.raises(ValueError, match=f"positions {position} to {position} of 2"):
            apply_delta(
                {"a": torch.zeros(2)},
                {f"a{INDEX_SUFFIX}": torch.tensor([position]), f"a{VALUE_SUFFIX}": torch.ones(1)},
            )


@pytest.mark.parametrize(
    "change",
    ["a name the base lacks", "another shape", "another dtype", "a name of the base left out"],
)
def test_a_walk_whose_tensors_are_not_the_bases_is_written_whole(tmp_path: Path, change: str):
    base = {"a": torch.zeros(64), "b": torch.zeros(64)}
    new = {"a": torch.zeros(64), "b": torch.zeros(64)}
    new["a"][0] = 1.0  # a sparse change: without the other change this version would be a delta
    if change == "a name the base lacks":
        new["c"] = torch.ones(3)
    elif change == "another shape":
        new["b"] = torch.zeros(8, 8)
    elif change == "another dtype":
        new["b"] = torch.zeros(64, dtype=torch.bfloat16)
    else:
        del new["b"]
    directory = WeightDirectory(tmp_path, delta=True)
    directory.write("1-run", base.items())
    written = directory.write("2-run", new.items())
    assert not directory.is_delta("2-run")  # a server applying it to its copy would refuse it, or keep a stale "b"
    assert same_bits(read(written), new)
    assert directory.delta is not None and same_bits(directory.delta.values, new)
    third = {name: tensor.clone() for name, tensor in new.items()}
    third["a"][1] = 2.0
    directory.write("3-run", third.items())
    assert directory.is_delta("3-run")  # the new tensors are the next delta's base
    server = read(written)
    apply_delta(server, read(directory.path("3-run")))
    assert same_bits(server, third)
