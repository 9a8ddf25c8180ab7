"""The trainer's side of reward scoring: wrapping its reward functions, and settling each batch's scoring.

`MaxEntGRPOTrainer` calls `wrap_reward_functions` once it is built, `settle_batch` at the end of each batch's
`_calculate_rewards`, and `recount_kept_tokens` on TRL's output of a batch that lost rows to scoring. Reward models
(``nn.Module``, ``reward_model_name_or_path``) are models the trainer runs itself, not functions that may fail over a
network: they are left unwrapped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from maxent_grpo.training.generation.batch_state import GenerationBatchState
from maxent_grpo.training.reward_contract import checked
from maxent_grpo.training.reward_masking import mask_dropped_rows
from maxent_grpo.training.reward_scoring.guarded import CallPolicy, guarded
from maxent_grpo.training.reward_scoring.ledger import ScoringLedger

KeepProvider = Callable[[], Sequence[bool] | None]


def wrap_reward_functions(trainer: Any, keep: KeepProvider) -> ScoringLedger:
    """Wrap each reward function of ``trainer`` (a `GRPOTrainer`) in place: it sees kept rows only
    (`reward_masking`), its returns are checked (`reward_contract`), and its calls are bounded and retried
    (`guarded`). Returns the ledger its calls report to."""
    args = trainer.args
    ledger = ScoringLedger(trainer.reward_func_names, args.reward_max_consecutive_failed_batches)
    policy = CallPolicy(args.reward_timeout, args.reward_retries)

    def rows(num_rows: int) -> Sequence[bool]:
        kept = keep()
        return [True] * num_rows if kept is None else kept

    trainer.reward_funcs = [
        func
        if isinstance(func, torch.nn.Module)
        else guarded(mask_dropped_rows(checked(func, name), keep), index, name, policy, ledger, rows)
        for index, (func, name) in enumerate(zip(trainer.reward_funcs, trainer.reward_func_names, strict=True))
    ]
    return ledger


def settle_batch(
    trainer: Any, ledger: ScoringLedger, batch: GenerationBatchState, rewards_per_func: torch.Tensor
) -> GenerationBatchState:
    """``batch`` with its rewards and without the rows its reward functions could not score (a collective; the
    rewards [N, F] are changed in place). Logs the `scoring/*` counts; raises `RewardFunctionGone` when a
    function keeps failing."""
    training = trainer.model.training
    assert batch.keep is not None and batch.global_keep is not None  # `_generate` decided both
    settled = ledger.settle(
        rewards_per_func,
        batch.global_keep,
        local_rows=len(batch.keep),
        group_size=trainer.num_generations if training else trainer.num_generations_eval,
        gather=trainer.accelerator.gather,
        training=training,
    )
    metrics = trainer._metrics["train" if training else "eval"]
    for name, value in settled.metrics.items():
        metrics[name].append(value)
    if training and bool(batch.global_keep.any()) and not bool(settled.keep.any()):
        trainer._empty_batches.record_unscored()  # no update from this batch: a run of only such ones says so
    global_keep = settled.keep.to(batch.global_keep.device)
    return batch.scored(rewards_per_func, global_keep, trainer.accelerator.process_index)


def recount_kept_tokens(output: dict[str, Any], keep: torch.Tensor, gather: Callable[[torch.Tensor], torch.Tensor]):
    """Set TRL's ``num_items_in_batch`` (the generation batch's loss tokens, over every process) to the tokens of
    kept rows only: TRL counted it before scoring, so it still holds the rows scoring left out (a collective)."""
    loss_mask = output["completion_mask"]
    if output.get("tool_mask") is not None:
        loss_mask = loss_mask * output["tool_mask"]
    kept_tokens = (loss_mask * keep.to(loss_mask.device).unsqueeze(1)).sum()
    output["num_items_in_batch"] = gather(kept_tokens).sum()
