"""`NCCLTransfer`: TRL's NCCL push of the training weights (``vllm_weight_transfer="nccl"``).

TRL's ``VLLMGeneration.sync_weights`` walks the model on every process (gathering DeepSpeed ZeRO-3 and FSDP shards,
merging PEFT adapters) and the main process broadcasts each tensor through the communicator it set up with the
server (``--weight-transfer-config '{"backend": "nccl"}'``), then resets the server's prefix cache. It keeps no
versions: a server that dies stops training.
"""

from __future__ import annotations

from typing import Any

from maxent_grpo.training.generation.weights.callable_push import CallablePush


class NCCLTransfer(CallablePush):
    """Push the training weights with TRL's NCCL push (called on every process: its walk is collective).

    Args:
        generation: TRL's ``VLLMGeneration`` in server mode (``GRPOTrainer.vllm_generation``), its communicator
            with the server set up.
    """

    def __init__(self, generation: Any) -> None:
        super().__init__(generation.sync_weights)
