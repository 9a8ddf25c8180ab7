"""A model whose config ties its output layer to its input embedding must hold one tensor for both.

transformers 5.24 breaks that tie when it loads a model sharded (``from_pretrained(..., distributed_config=...)``, how
FSDP2 runs on CPU): the output layer becomes a copy of the embedding that the optimizer never sees, so the forward
the loss is computed with drifts from the parameters that are trained, saved and sent to a vLLM engine (which ties
them again). Nothing in transformers or TRL says so; the trainer refuses such a model before it trains.
"""

from __future__ import annotations

import torch


def check_tied_output_layer(model: torch.nn.Module) -> None:
    """Raise ValueError when ``model``'s config ties its output layer to its input embedding but they are two
    tensors."""
    config = getattr(model, "config", None)
    if not getattr(config, "tie_word_embeddings", False):
        return
    inputs = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    outputs = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    input_weight, output_weight = getattr(inputs, "weight", None), getattr(outputs, "weight", None)
    if input_weight is None or output_weight is None or output_weight is input_weight:
        return
    raise ValueError(
        "the model's config ties its output layer to its input embedding (tie_word_embeddings=True), but they are two "
        "tensors: training would update the embedding while the forward uses a copy of it that never changes. "
        "transformers unties them when it loads a model sharded (distributed_config=...); load the model whole and "
        "let accelerate shard it (FSDP, DeepSpeed), or load one whose output layer is its own."
    )
