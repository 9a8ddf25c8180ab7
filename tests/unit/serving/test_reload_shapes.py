"""The reload extension refuses weights whose shapes do not fit the served model, reading only safetensors headers."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from maxent_grpo.serving.reload_extension import (
    check_shapes,
    checkpoint_files,
    checkpoint_shapes,
)


def test_shapes_come_from_every_file_header(tmp_path):
    save_file({"a.weight": torch.zeros(3, 4), "b.bias": torch.zeros(5)}, tmp_path / "model-1.safetensors")
    save_file({"c.weight": torch.zeros(2, 2, 2)}, tmp_path / "model-2.safetensors")
    files = sorted(tmp_path.glob("*.safetensors"))
    assert checkpoint_shapes(files) == {"a.weight": (3, 4), "b.bias": (5,), "c.weight": (2, 2, 2)}


def test_a_shape_that_differs_is_named_with_both_shapes():
    served = {"embed.weight": (99, 8), "norm.weight": (8,), "lm_head.weight": (99, 8)}
    check_shapes({"embed.weight": (99, 8), "norm.weight": (8,)}, served)  # a subset, same shapes: taken
    check_shapes({"embed.weight": (99, 8), "extra.weight": (3,)}, served)  # a name the server lacks: left alone
    with pytest.raises(ValueError, match=r"1 tensors differ in shape, embed\.weight \[97, 8\] \(served: \[99, 8\]\)"):
        check_shapes({"embed.weight": (97, 8), "norm.weight": (8,)}, served)


def test_many_differences_are_counted_and_the_first_three_named():
    served = {f"layer{i}.weight": (4,) for i in range(5)}
    with pytest.raises(ValueError, match=r"5 tensors differ in shape, layer0.*layer1.*layer2[^;]*; \.\.\.; train"):
        check_shapes({name: (5,) for name in served}, served)


def test_a_sharded_checkpoint_is_the_files_its_index_names_and_a_leftover_beside_them_is_not_part_of_it(tmp_path):
    for name in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors"):
        save_file({"w": torch.zeros(1)}, tmp_path / name)
    weight_map = {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    assert [path.name for path in checkpoint_files(tmp_path)] == sorted(weight_map.values())
    (tmp_path / "model.safetensors.index.json").unlink()
    assert len(checkpoint_files(tmp_path)) == 3  # no index: every file
