"""`live_parameter_walk`: a staged version is written behind the step only where TRL's walk yields the live
parameters, which nothing but the optimizer step changes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from peft import LoraConfig, get_peft_model
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

from maxent_grpo.training.generation.backends.selection import live_parameter_walk
from tests.support.training import tiny_model_and_tokenizer


def trainer_of(model: torch.nn.Module, deepspeed: bool = False, fsdp: bool = False) -> SimpleNamespace:
    return SimpleNamespace(model=model, is_deepspeed_enabled=deepspeed, is_fsdp_enabled=fsdp)


def test_a_plain_model_is_walked_live():
    assert live_parameter_walk(trainer_of(torch.nn.Linear(2, 2)))


@pytest.mark.parametrize("layout", ["deepspeed", "fsdp"])
def test_deepspeed_and_fsdp_walks_are_not(layout):
    assert not live_parameter_walk(trainer_of(torch.nn.Linear(2, 2), **{layout: True}))


def test_a_peft_model_is_not_since_its_walk_merges_the_adapters_into_the_weights():
    model, _ = tiny_model_and_tokenizer()
    peft_model = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"]))
    assert not live_parameter_walk(trainer_of(peft_model))


def test_a_model_with_dtensor_parameters_is_not_since_its_walk_gathers_each_whole(tmp_path):
    # A model sharded when it was loaded (transformers' distributed_config) holds DTensor parameters: here one, on a
    # one-process gloo group of this test's own.
    store = torch.distributed.FileStore(str(tmp_path / "store"), 1)
    torch.distributed.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        model = torch.nn.Linear(2, 2)
        model.weight = torch.nn.Parameter(distribute_tensor(model.weight.detach(), mesh, [Shard(0)]))
        assert not live_parameter_walk(trainer_of(model))
    finally:
        torch.distributed.destroy_process_group()
