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

from collections.abc import Callable
from typing import Any

import torch
from trl.models.utils import disable_gradient_checkpointing

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

#: ``per_token_logps(output) -> [B, T]``: the policy's per-token log-probs of a rollout batch's completions.
PerTokenLogps = Callable[[dict[str, Any]], torch.Tensor]


def sequence_logps(output: dict[str, Any], per_token_logps: PerTokenLogps) -> torch.Tensor:
    """``[B]`` summed log-prob (at the sampling temperature) of this process's completions of a training batch under
    the sampling policy: TRL's ``old_per_token_logps`` when it kept them, else ``per_token_logps(output)``.

    Tokens outside ``completion_mask`` (and ``tool_mask``: tool output is not sampled) do not count; a non-finite
    log-prob of a counted token makes the completion's sum non-finite.
    """
    per_token = output.get("old_per_token_logps")
    if per_token is None:
        per_token = per_token_logps(output)
    mask = (output["completion_mask"] * output.get("tool_mask", 1)).bool()
    # A non-finite log-prob on a counted token makes the sum non-finite: that completion gets no estimate.
    return torch.where(mask, per_token.float(), 0.0).sum(dim=1)


@torch.no_grad()
def policy_per_token_logps(
    forward: Callable[..., tuple[torch.Tensor, Any, Any]],
    model: torch.nn.Module,
    output: dict[str, Any],
    *,
    batch_size: int,
    gradient_checkpointing_kwargs: dict[str, Any] | None,
) -> torch.Tensor:
    """``[B, T]`` per-token log-probs of the batch's completions by one no-grad forward of ``model``.

    Args:
        forward: TRL's ``GRPOTrainer._get_per_token_logps_and_entropies`` (bound), the forward TRL computes its own
            ``old_per_token_logps`` with (temperature applied, micro-batched, multimodal inputs passed on).
        model: the (wrapped) training model.
        output: the rollout batch TRL's ``_generate_and_score_completions`` returned.
        batch_size: rows per forward (``per_device_train_batch_size``).
        gradient_checkpointing_kwargs: the run's, so that checkpointing is switched off for this forward only.
    """
    completion_ids = output["completion_ids"]
    input_ids = torch.cat([output["prompt_ids"], completion_ids], dim=1)
    attention_mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
    with disable_gradient_checkpointing(model, gradient_checkpointing_kwargs):
        per_token, _, _ = forward(
            model,
            input_ids,
            attention_mask,
            completion_ids.size(1),
            batch_size=batch_size,
            **{key: output[key] for key in _FORWARD_KEYS if key in output},
        )
    return per_token
