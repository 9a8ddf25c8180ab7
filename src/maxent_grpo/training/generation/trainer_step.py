"""A `MaxEntGRPOTrainer`'s generation step: what its `_generate` hands off.

`generate_batch` syncs the backend's weights (with ``async_generation``, written while the call made ahead still runs,
then published), runs one `GenerationStep` (with dynamic sampling's refill in training),
logs its metrics with TRL's, counts empty batches, starts the next window's call ahead (``async_generation``), and
returns TRL's rows with the batch's new `GenerationBatchState`. `score_rows` is dynamic sampling's scorer: TRL's reward
functions on the rows a refill round scores.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from trl import GRPOTrainer

from maxent_grpo.collectives import Collectives
from maxent_grpo.training.dynamic_sampling import merge_extra_logs
from maxent_grpo.training.generation.batch_state import GenerationBatchState
from maxent_grpo.training.generation.completion_format import row_completions
from maxent_grpo.training.generation.contract.completion_check import CompletionCheck
from maxent_grpo.training.generation.episodes.backend import EpisodeBackend
from maxent_grpo.training.generation.episodes.metrics import tool_metrics
from maxent_grpo.training.generation.episodes.trainer_setup import step_backend
from maxent_grpo.training.generation.rows import GeneratedRows
from maxent_grpo.training.generation.step import GenerationStep, GroupAgreement, Refill, weight_counts
from maxent_grpo.training.reward_masking import silence_unscorable_warning


@dataclass(frozen=True)
class GeneratedBatch:
    """What a generation step hands back to `_generate`.

    Attributes:
        rows: TRL's rows for this process [B].
        prompts: the prompts TRL is to score and log [B]: dynamic sampling's replacements, an episode's prompt as the
            episode saw it (its reset observation appended), else the prompts it was given.
        completions: the completions reward functions receive [B] (`completion_format`).
        state: the batch's state from now on.
    """

    rows: GeneratedRows
    prompts: list[Any]
    completions: list[Any]
    state: GenerationBatchState


def generate_batch(trainer: Any, prompts: list[Any]) -> GeneratedBatch:
    """One generation step of ``trainer`` (a `MaxEntGRPOTrainer`) for this process's ``prompts`` [B] (a collective).

    The batch's dataset rows are those of the trainer's current state (``[]`` when `_generate` is called outside a
    batch, as nothing then needs them)."""
    mode = "train" if trainer.model.training else "eval"
    metrics = trainer._metrics[mode]
    ahead = trainer.async_generation
    training = mode == "train"
    written_before = weight_counts(trainer.generation_backend)  # the weights this step writes are in its metrics
    if ahead is not None and training:
        trainer._stage_backend_weights()  # the write overlaps the call made ahead, which may still be generating
    replayed = None if ahead is None else ahead.take(trainer._step, prompts, trainer.state.global_step, training)
    trainer._sync_backend_weights()
    collectives = Collectives.of(trainer.accelerator)
    check = CompletionCheck(
        len(trainer._tokenizer), needs_logprobs=trainer.use_vllm and trainer.vllm_importance_sampling_correction
    )
    backend, requests = step_backend(trainer, copy.deepcopy(prompts), check, collectives)
    backend = backend if replayed is None else replayed
    step = GenerationStep(
        backend,
        check=check,
        collectives=collectives,
        group_size=trainer.num_generations if training else trainer.num_generations_eval,
        max_retry_rounds=trainer.args.generation_max_retries,
        placeholder_prompt_id=trainer._tokenizer.pad_token_id,
        placeholder_completion_id=trainer.eos_token_ids[0],
        step_timeout=trainer.args.generation_step_timeout,
        counts_before=None if replayed is not None else written_before,  # a replayed call counts from its own start
    )
    inputs = [] if trainer._batch is None else trainer._batch.inputs
    refill = None
    if trainer.dynamic_sampler is not None and training:
        score = partial(score_rows, trainer, inputs)
        refill = Refill(trainer.dynamic_sampler, inputs, score, lambda: bool(trainer._pending_metrics))
    result = step.run(requests, stop_ids=[*trainer.eos_token_ids, trainer._tokenizer.pad_token_id], refill=refill)
    rows, agreement = result.rows, result.agreement
    if result.refilled is not None:
        prompts = copy.deepcopy(result.prompts)
        for name, value in result.refilled.outcome.metrics().items():
            metrics[name].append(value)
    for name, value in result.metrics.values.items():
        metrics[name].append(value)
    if training:
        trainer.state.num_input_tokens_seen += result.metrics.kept_tokens
    if ahead is not None and training:
        for name, value in ahead.metrics(rows, trainer.state.global_step, collectives).items():
            metrics[name].append(value)
        ahead.start_next(trainer._step, trainer._sync_backend_weights, last_window=trainer._in_last_window)
    metrics["num_tokens"] = [trainer.state.num_input_tokens_seen]
    trainer._empty_batches.record(
        training=training,
        kept_any=bool(agreement.group_kept.any()),
        num_groups=len(agreement.group_kept),
        reasons=result.reasons,  # an episode's failures say why too
    )
    if isinstance(backend, EpisodeBackend):
        # TRL scores each row with its prompt as the episode saw it and hands reward functions each row's environment.
        traces = rows.episodes
        prompts = [prompt if trace is None else trace.prompt for prompt, trace in zip(prompts, traces, strict=True)]
        trainer.environments = None if trainer.environment_pool is None else [t and t.environment for t in traces]
        for name, value in tool_metrics(rows, backend.failures, collectives).items():
            metrics[name].append(value)
    state = GenerationBatchState(
        inputs,
        keep=rows.keep,
        global_keep=agreement.global_keep,
        texts=rows.texts,
        rewards_per_func=None if result.refilled is None else result.refilled.rewards_per_func,
    )
    return GeneratedBatch(rows, prompts, row_completions(trainer._tokenizer, prompts, rows), state)


def score_rows(
    trainer: Any,
    inputs: list[dict[str, Any]],
    prompts: list[Any],
    rows: GeneratedRows,
    agreement: GroupAgreement,
    rows_to_score: Sequence[bool] | None,
) -> torch.Tensor:
    """Dynamic sampling's scorer (`step.RowScorer`): TRL's reward functions on the kept rows marked in
    ``rows_to_score`` (None: the final scoring of every row, whose ``log_metric`` values replace the rounds');
    ``log_extra`` columns keep, for rows not scored this round, the values of the round that scored them."""
    if rows_to_score is None:
        rows_to_score = [True] * len(prompts)
        trainer._pending_metrics.clear()
    keep = [k and s for k, s in zip(agreement.keep, rows_to_score, strict=True)]
    trainer._batch = GenerationBatchState(inputs, keep=keep)  # what the reward functions' wrappers let through
    earlier = {column: list(values) for column, values in trainer._pending_extra_logs.items()}
    trainer._pending_extra_logs.clear()
    with silence_unscorable_warning():
        completions = row_completions(trainer._tokenizer, prompts, rows)
        rewards_per_func = GRPOTrainer._calculate_rewards(trainer, inputs, prompts, completions, rows.completion_ids)
    merged = merge_extra_logs(earlier, dict(trainer._pending_extra_logs), rows_to_score)
    trainer._pending_extra_logs.clear()
    trainer._pending_extra_logs.update(merged)
    return rewards_per_func
