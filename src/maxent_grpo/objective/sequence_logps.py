"""The sampling policy's log-probability of each completion of a rollout batch.

TRL keeps the training model's per-token log-probs at generation time (``old_per_token_logps``) only in some settings
(generation and optimisation steps misaligned, or vLLM with importance-sampling correction), decided by the
configuration and so the same on every process. Otherwise they are computed here with TRL's own forward
(``_get_per_token_logps_and_entropies``, as TRL computes ``old_per_token_logps``). Whether the forward runs never
depends on a process's own rows (a process whose rows were all dropped holds placeholder rows), so sharded (ZeRO-3 /
FSDP) forwards stay symmetric. vLLM's own sampling log-probs are not used: their presence differs between processes
holding placeholder rows, and a server without ``--logprobs-mode processed_logprobs`` returns them before temperature.

The forward applies the sampling temperature but not ``top_p``, ``top_k``, ``min_p`` or a repetition penalty, as
TRL's own log-probs do not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from trl.models.utils import disable_gradient_checkpointing

if TYPE_CHECKING:
    from maxent_grpo.trainer import MaxEntGRPOTrainer

#: Multimodal inputs TRL keeps in the rollout batch and passes back to the model's forward.
_FORWARD_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)


def sequence_logps(trainer: MaxEntGRPOTrainer, output: dict[str, Any]) -> torch.Tensor:
    """``[B]`` summed log-prob (at the sampling temperature) of this process's completions of a training batch under
    the sampling policy.

    Tokens outside ``completion_mask`` (and ``tool_mask``: tool output is not sampled) do not count; a non-finite
    log-prob of a counted token makes the completion's sum non-finite.
    """
    per_token = output.get("old_per_token_logps")
    if per_token is None:
        per_token = _policy_per_token_logps(trainer, output)
    mask = (output["completion_mask"] * output.get("tool_mask", 1)).bool()
    # A non-finite log-prob on a counted token makes the sum non-finite: that completion gets no estimate.
    return torch.where(mask, per_token.float(), 0.0).sum(dim=1)


@torch.no_grad()
def _policy_per_token_logps(trainer: MaxEntGRPOTrainer, output: dict[str, Any]) -> torch.Tensor:
    completion_ids = output["completion_ids"]
    input_ids = torch.cat([output["prompt_ids"], completion_ids], dim=1)
    attention_mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
    args = trainer.args
    with disable_gradient_checkpointing(trainer.model, args.gradient_checkpointing_kwargs):
        per_token, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model,
            input_ids,
            attention_mask,
            completion_ids.size(1),
            batch_size=args.per_device_train_batch_size,
            **{key: output[key] for key in _FORWARD_KEYS if key in output},
        )
    return per_token
