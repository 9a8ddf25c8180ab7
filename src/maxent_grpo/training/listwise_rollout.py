"""The typed rollout batch the listwise objective reads (`objective.listwise.RolloutBatch`), built from a trainer.

`rollout_batch` takes what TRL's `_generate_and_score_completions` just returned and what the generation step decided
for the batch (`GenerationBatchState`); the objective itself knows no trainer.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from maxent_grpo.objective.listwise import RolloutBatch
from maxent_grpo.objective.sequence_logps import policy_per_token_logps, sequence_logps
from maxent_grpo.training.generation.batch_state import GenerationBatchState


def rollout_batch(trainer: Any, output: dict[str, Any], batch: GenerationBatchState) -> RolloutBatch:
    """The listwise objective's view of the batch ``trainer`` (a `GRPOTrainer`) just scored into ``output``.

    Args:
        trainer: the trainer (its mode, group size, reward weights, beta and step counters are read).
        output: TRL's batch (completion ids and masks, reference log-probs), [B] rows.
        batch: the generation step's state for it, its rewards scored.
    """
    args = trainer.args
    training = trainer.model.training
    sampling_forward = partial(
        policy_per_token_logps,
        trainer._get_per_token_logps_and_entropies,
        trainer.model,
        batch_size=args.per_device_train_batch_size,
        gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs,
    )
    return RolloutBatch(
        rewards_per_func=batch.rewards_per_func,
        reward_weights=trainer.reward_weights,
        row_keep=batch.global_keep,
        completion_mask=output["completion_mask"] * output.get("tool_mask", 1),
        completion_ids=output["completion_ids"],
        texts=batch.texts,
        ref_per_token_logps=output.get("ref_per_token_logps"),
        group_size=trainer.num_generations if training else trainer.num_generations_eval,
        beta=trainer.beta,
        training=training,
        global_step=trainer.state.global_step,
        max_steps=trainer.state.max_steps,
        sampling_logps=partial(sequence_logps, output, sampling_forward),
    )
