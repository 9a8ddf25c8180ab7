"""The reference model of a policy that was built in-process, which no name can load again.

TRL 1.16's `GRPOTrainer.__init__` builds the reference model (``beta != 0``) only by name:
``create_model_from_path(policy.config._name_or_path, ...)``. A model built from a config (the tiny model of
`maxent_grpo.tiny_model`, or any `AutoModelForCausalLM.from_config`) has the name '', so stock TRL fails with "Repo id
must use alphanumeric chars", offline or not. TRL takes no reference model as an argument, so while its `__init__`
runs, its request for the empty name is answered with a copy of the policy as it is then (before any training), in
the dtype and attention implementation TRL asks for. Every named model still loads the way TRL loads it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import PreTrainedModel
from trl.trainer import grpo_trainer
from trl.trainer.utils import get_config_model_id


def built_in_process(model: Any) -> bool:
    """Whether ``model`` is a model instance without the name of a checkpoint it was loaded from."""
    return isinstance(model, PreTrainedModel) and not get_config_model_id(model.config)


@contextmanager
def reference_from_policy(policy: PreTrainedModel) -> Iterator[None]:
    """While active, TRL's `GRPOTrainer` builds the reference model of ``policy`` (whose name is '') as its copy."""
    load_by_name = grpo_trainer.create_model_from_path

    def create_model(model_id: str, architecture: Any = None, **kwargs: Any) -> PreTrainedModel:
        if model_id:
            return load_by_name(model_id, architecture, **kwargs)
        reference = copy.deepcopy(policy)
        dtype = kwargs.get("dtype")
        if isinstance(dtype, torch.dtype) and dtype != reference.dtype:
            reference = reference.to(dtype)
        attn_implementation = kwargs.get("attn_implementation")
        if attn_implementation and attn_implementation != reference.config._attn_implementation:
            reference.set_attn_implementation(attn_implementation)
        return reference

    grpo_trainer.create_model_from_path = create_model
    try:
        yield
    finally:
        grpo_trainer.create_model_from_path = load_by_name
