"""`in_place_reload.reload_in_place` against vLLM's own layer-wise reload, on a module small enough to read: a reload
that fails part-way leaves the engine's tensors as they were and no trace in vLLM's per-layer progress, so the next
reload loads every weight it is given and reports what it loaded truthfully."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
import torch

from maxent_grpo.serving.in_place_reload import reload_in_place


class Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Parameter(torch.zeros(4), requires_grad=False)
        self.b = torch.nn.Parameter(torch.zeros(4), requires_grad=False)


class TwoWeights(torch.nn.Module):
    """One layer of two weights, loaded the way vLLM's models load theirs (each parameter's ``weight_loader``)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = Layer()

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        from vllm.model_executor.model_loader.weight_utils import default_weight_loader

        parameters = dict(self.named_parameters())
        loaded = set()
        for name, tensor in weights:
            parameter = parameters[name]  # a name the model lacks: the load fails here, part-way
            getattr(parameter, "weight_loader", default_weight_loader)(parameter, tensor)
            loaded.add(name)
        return loaded


@pytest.mark.parametrize("copy", [True, False])
def test_a_reload_that_fails_part_way_leaves_no_trace_and_the_next_one_loads_every_weight(copy: bool) -> None:
    from vllm.model_executor.model_loader.reload import record_metadata_for_reloading

    model = TwoWeights()
    record_metadata_for_reloading(model)  # as vLLM does once it has loaded a model
    with pytest.raises(KeyError, match=r"layer\.missing"):
        reload_in_place(model, None, [("layer.a", torch.full((4,), 1.0)), ("layer.missing", torch.ones(1))], copy=copy)
    assert torch.equal(model.layer.a, torch.zeros(4)) and torch.equal(model.layer.b, torch.zeros(4))

    stale = reload_in_place(
        model, None, [("layer.a", torch.full((4,), 2.0)), ("layer.b", torch.full((4,), 3.0))], copy=copy
    )
    assert stale == []
    assert torch.equal(model.layer.a, torch.full((4,), 2.0)) and torch.equal(model.layer.b, torch.full((4,), 3.0))

    stale = reload_in_place(model, None, [("layer.a", torch.full((4,), 4.0))], copy=copy)  # b left out: reported
    assert stale == ["layer.b", "layer (4 of 8 values)"]
