"""`MaxEntGRPOTrainer`: TRL's `GRPOTrainer` with robust generation backends and the MaxEnt listwise objective."""

from __future__ import annotations

import copy
import json
import logging
import os
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer

from maxent_grpo.config import maxent_config_from
from maxent_grpo.listwise import ListwiseObjective
from maxent_grpo.training.dynamic_sampling import DynamicSampler
from maxent_grpo.training.generation.backends import (
    GenerationBackend,
    TransformersBackend,
    VLLMColocateBackend,
    VLLMServerBackend,
)
from maxent_grpo.training.generation.backends.protocol import Completion
from maxent_grpo.training.generation.collect import STAT_KEYS
from maxent_grpo.training.generation.completion_format import format_completions
from maxent_grpo.training.generation.local_batch import LocalBatch
from maxent_grpo.training.generation.rows import GeneratedRows, assemble_rows, local_runs
from maxent_grpo.training.reward_masking import mask_dropped_rows, silence_unscorable_warning

logger = logging.getLogger(__name__)

CONTROLLER_STATE_FILE = "maxent_controllers.json"


class GroupAgreement(NamedTuple):
    """Which groups every process kept: gathered row table [N, 4], kept groups [N / G], kept rows [N], local [B]."""

    table: torch.Tensor
    group_kept: torch.Tensor
    global_keep: torch.Tensor
    keep: list[bool]


class MaxEntGRPOTrainer(GRPOTrainer):
    """GRPO whose generation goes through a backend and the retry / aggregate / drop helpers.

    Hooks overridden (everything else is TRL 1.16's `GRPOTrainer`):

    - `_generate`: asks the backend for each prompt group, retries short groups for their deficit, drops groups that
      stay incomplete on every process alike, and returns TRL's tuple built from the backend's own prompt ids.
    - `_calculate_rewards`: reward functions only ever see kept rows; dropped rows score NaN (unscorable).
    - `_generate_and_score_completions`: with ``maxent_objective="listwise"``, replaces the advantages by the MaxEnt
      listwise ones and steps the tau / beta controllers.
    - `compute_loss` / `create_optimizer`: an optimizer step whose batches held no kept row changes no parameter.
    - `_save_checkpoint` / `_load_optimizer_and_scheduler`: controller state travels with checkpoints.

    Args:
        generation_backend: any object implementing `GenerationBackend`. When None, the trainer builds the built-in
            backend that TRL's own fields select: `TransformersBackend`, or with ``use_vllm`` the colocate or server
            backend over TRL's vLLM machinery.
        args: a `MaxEntGRPOConfig`; a plain `trl.GRPOConfig` (its values, MaxEnt fields at their defaults); or None,
            for the default `GRPOTrainer` would build (see `maxent_config_from`).
        All other arguments are `GRPOTrainer`'s. Tools, environments and `rollout_func` are not supported.
    """

    def __init__(self, *args: Any, generation_backend: GenerationBackend | None = None, **kwargs: Any) -> None:
        # `args` (the config) is GRPOTrainer's third parameter; resolve it before anything is loaded.
        positional = list(args)
        model = kwargs["model"] if "model" in kwargs else positional[0] if positional else None
        if model is None:
            raise TypeError("MaxEntGRPOTrainer needs a `model` (a model id, a path or a model instance).")
        if len(positional) > 2:
            positional[2] = maxent_config_from(positional[2], model)
        else:
            kwargs["args"] = maxent_config_from(kwargs.get("args"), model)
        for unsupported in ("tools", "rollout_func", "environment_factory"):
            if kwargs.get(unsupported) is not None:
                raise ValueError(
                    f"MaxEntGRPOTrainer does not support `{unsupported}`: its generation step is the backend + "
                    "retry/drop pipeline. Use a custom `generation_backend` instead."
                )
        super().__init__(*positional, **kwargs)
        if self.use_vllm and self.vllm_mode == "colocate" and self.args.vllm_tensor_parallel_size > 1:
            raise ValueError("vllm_tensor_parallel_size > 1 is not supported by MaxEntGRPOTrainer's colocate backend.")
        if generation_backend is not None and not isinstance(generation_backend, GenerationBackend):
            raise TypeError(f"generation_backend {generation_backend!r} has no generate(prompts, counts) method.")
        self.generation_backend = generation_backend if generation_backend is not None else self._default_backend()
        if not hasattr(self, "_last_loaded_step"):
            self._last_loaded_step = -1
        self._row_keep: list[bool] | None = None
        self._global_row_keep: torch.Tensor | None = None
        self._last_completion_texts: list[str] = []
        self._last_completion_ids: list[list[int]] = []
        self._last_rewards_per_func: torch.Tensor | None = None
        self._consecutive_empty_batches = 0
        self._window_has_data = False
        self._vocab_size = len(self._tokenizer)
        self.reward_funcs = [
            func if isinstance(func, torch.nn.Module) else mask_dropped_rows(func, lambda: self._row_keep)
            for func in self.reward_funcs
        ]
        self.listwise = ListwiseObjective.from_config(self.args) if self.args.maxent_objective == "listwise" else None
        self._current_inputs: list = []
        self._precomputed_rewards: torch.Tensor | None = None
        self.dynamic_sampler = self._build_dynamic_sampler() if self.args.dynamic_sampling else None

    def _build_dynamic_sampler(self) -> DynamicSampler:
        metric = self.args.dynamic_sampling_metric
        if metric != "sum" and metric not in self.reward_func_names:
            raise ValueError(
                f"dynamic_sampling_metric={metric!r} is invalid: expected 'sum' or one of the reward functions "
                f"{self.reward_func_names}."
            )
        return DynamicSampler(
            self.train_dataset,
            self.reward_weights,
            metric_column=None if metric == "sum" else self.reward_func_names.index(metric),
            max_rounds=self.args.dynamic_sampling_max_rounds,
            error_at_cap=self.args.dynamic_sampling_at_cap == "error",
            seed=self.args.seed,
        )

    # ----------------------------------------------------------------------------------------------- backends
    def _default_backend(self) -> GenerationBackend:
        args = self.args
        if not self.use_vllm:
            return TransformersBackend(self)
        sampling = {
            "max_tokens": self.max_completion_length,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k if self.top_k is not None else 0,
            "min_p": self.min_p if self.min_p is not None else 0.0,
            "repetition_penalty": self.repetition_penalty,
            "generation_kwargs": args.generation_kwargs,
            "chat_template_kwargs": self.chat_template_kwargs,
            "weight_sync": self.vllm_generation.sync_weights,
        }
        if self.vllm_mode == "colocate":
            return VLLMColocateBackend(self.vllm_generation.llm, self._tokenizer, **sampling)
        base_url = args.vllm_server_base_url or f"http://{args.vllm_server_host}:{args.vllm_server_port}"
        return VLLMServerBackend(
            base_url,
            tokenizer=self._tokenizer,
            request_timeout=args.vllm_request_timeout,
            max_attempts=args.vllm_request_attempts,
            connection_timeout=args.vllm_server_timeout,
            **sampling,
        )

    def _sync_backend_weights(self) -> None:
        if self.state.global_step == self._last_loaded_step:
            return
        sync = getattr(self.generation_backend, "sync_weights", None)
        if sync is not None:
            sync(self.accelerator.unwrap_model(self.model))
            self.accelerator.wait_for_everyone()
        self._last_loaded_step = self.state.global_step

    # --------------------------------------------------------------------------------------------- generation
    def _check_completion(self, completion: Completion) -> str | None:
        """Why a completion is unusable (I5), or None: failed, empty, or ids outside the tokenizer's vocabulary."""
        vocab_size = self._vocab_size
        if completion.failed:
            return "backend marked the completion as failed"
        if not completion.completion_ids:
            return "empty completion"
        if not completion.prompt_ids:
            return "empty prompt ids"
        if any(not (0 <= t < vocab_size) for t in completion.completion_ids):
            return f"completion token id outside the vocabulary [0, {vocab_size})"
        if any(not (0 <= t < vocab_size) for t in completion.prompt_ids):
            return f"prompt token id outside the vocabulary [0, {vocab_size})"
        if completion.logprobs is not None and len(completion.logprobs) != len(completion.completion_ids):
            return "logprobs length differs from completion length"
        return None

    def _generate(self, prompts: list) -> tuple:
        mode = "train" if self.model.training else "eval"
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        self._sync_backend_weights()
        runs = local_runs(len(prompts), self.accelerator.process_index * len(prompts), group_size)
        batch = LocalBatch(copy.deepcopy(prompts), runs)
        self._collect(batch, range(len(runs)))
        agreement = self._agree(batch, group_size)
        if self.dynamic_sampler is not None and mode == "train":
            agreement = self._refill_groups_without_signal(prompts, batch, agreement, group_size)

        rows = self._assemble(batch, agreement)
        self._row_keep = rows.keep
        self._global_row_keep = agreement.global_keep
        self._last_completion_texts = rows.texts
        self._last_completion_ids = rows.completion_ids
        self._log_generation_metrics(mode, agreement, batch.stats, batch.reasons)
        tool_mask = (
            None
            if all(rows.keep)
            else [[int(k)] * len(ids) for k, ids in zip(rows.keep, rows.completion_ids, strict=True)]
        )
        completions = self._format_completions(batch.prompts, rows)
        return rows.prompt_ids, rows.completion_ids, tool_mask, completions, rows.logprobs, {}, None, []

    def _collect(self, batch: LocalBatch, run_indices: Sequence[int]) -> None:
        batch.collect(
            self.generation_backend,
            list(run_indices),
            max_retry_rounds=self.args.generation_max_retries,
            check=self._check_completion,
        )

    def _agree(self, batch: LocalBatch, group_size: int) -> GroupAgreement:
        """Decide, identically on every process, which groups are complete everywhere (one collective)."""
        # [B, 4] rows of (complete, prompt length, completion length, last id) -> [num_processes * B, 4].
        table = self.accelerator.gather(
            torch.tensor(batch.row_table(), dtype=torch.long, device=self.accelerator.device)
        )
        group_kept = table[:, 0].view(-1, group_size).bool().all(dim=1)
        global_keep = group_kept.repeat_interleave(group_size)
        start = self.accelerator.process_index * len(batch.prompts)
        return GroupAgreement(table, group_kept, global_keep, global_keep[start : start + len(batch.prompts)].tolist())

    def _assemble(self, batch: LocalBatch, agreement: GroupAgreement) -> GeneratedRows:
        return assemble_rows(
            batch.runs,
            batch.groups,
            agreement.keep,
            placeholder_prompt_id=self._tokenizer.pad_token_id,
            placeholder_completion_id=self.eos_token_ids[0],
        )

    def _format_completions(self, prompts: Sequence[Any], rows: GeneratedRows) -> list:
        return format_completions(
            self._tokenizer, prompts, rows.prompt_ids, rows.completion_ids, rows.texts, rows.keep
        )

    def _refill_groups_without_signal(
        self, prompts: list, batch: LocalBatch, agreement: GroupAgreement, group_size: int
    ) -> GroupAgreement:
        """Dynamic sampling: replace groups without learning signal, then hand TRL the final rewards."""
        current = {"agreement": agreement}
        rewards: torch.Tensor | None = None

        def score(rows_to_score: Sequence[bool]) -> tuple[torch.Tensor, torch.Tensor]:
            nonlocal rewards
            agreed = current["agreement"]
            rows = self._assemble(batch, agreed)
            self._row_keep = [k and s for k, s in zip(agreed.keep, rows_to_score, strict=True)]
            with silence_unscorable_warning():
                fresh = GRPOTrainer._calculate_rewards(
                    self,
                    self._current_inputs,
                    batch.prompts,
                    self._format_completions(batch.prompts, rows),
                    rows.completion_ids,
                )
            local = torch.tensor(list(rows_to_score), dtype=torch.bool, device=self.accelerator.device)
            scored = self.accelerator.gather(local).to(fresh.device)
            merged = fresh if rewards is None else torch.where(scored.unsqueeze(1), fresh, rewards)
            merged[~agreed.global_keep.to(merged.device)] = torch.nan
            rewards = merged
            return merged, agreed.group_kept

        def regenerate(local_rows: list[int]) -> torch.Tensor:
            rows = set(local_rows)
            self._collect(batch, [i for i, run in enumerate(batch.runs) if run.start in rows])
            current["agreement"] = self._agree(batch, group_size)
            return current["agreement"].group_kept

        outcome = self.dynamic_sampler.refill(
            step=self.state.global_step,
            group_size=group_size,
            row_offset=self.accelerator.process_index * len(prompts),
            inputs=self._current_inputs,
            prompts=batch.prompts,
            score=score,
            regenerate=regenerate,
        )
        prompts[:] = copy.deepcopy(batch.prompts)  # TRL scores and logs the caller's list: the replaced prompts
        self._precomputed_rewards = rewards
        metrics = self._metrics["train"]
        metrics["dynamic_sampling/filtered_groups"].append(float(outcome.filtered_groups))
        metrics["dynamic_sampling/rounds"].append(float(outcome.rounds))
        metrics["dynamic_sampling/generated_groups"].append(
            outcome.generated_groups / max(outcome.groups_with_signal, 1)
        )
        return current["agreement"]

    def _log_generation_metrics(
        self, mode: str, agreement: GroupAgreement, stats: dict[str, int], reasons: Sequence[str]
    ) -> None:
        """Log TRL's completion metrics over kept rows only, plus the generation robustness counters."""
        table, global_keep, group_kept = agreement.table, agreement.global_keep, agreement.group_kept
        metrics = self._metrics[mode]
        device = self.accelerator.device
        local_stats = torch.tensor([stats[key] for key in STAT_KEYS], dtype=torch.long, device=device)
        all_stats = self.accelerator.gather(local_stats).view(-1, len(STAT_KEYS))
        summed = dict(zip(STAT_KEYS, all_stats.sum(dim=0).tolist(), strict=True))
        metrics["generation/dropped_prompts"].append(float((~group_kept).sum().item()))
        metrics["generation/retried_prompts"].append(float(summed["retried_prompts"]))
        metrics["generation/retry_rounds"].append(float(all_stats[:, STAT_KEYS.index("retry_rounds")].max().item()))
        metrics["generation/invalid_completions"].append(float(summed["invalid_completions"]))
        metrics["generation/backend_errors"].append(float(summed["backend_errors"]))

        kept = table[global_keep]
        if kept.numel() == 0:
            self._on_empty_batch(mode, len(group_kept), reasons)
            metrics["num_tokens"] = [self.state.num_input_tokens_seen]
            return
        if mode == "train":
            self._consecutive_empty_batches = 0
            self.state.num_input_tokens_seen += int(kept[:, 1].sum().item() + kept[:, 2].sum().item())
        metrics["num_tokens"] = [self.state.num_input_tokens_seen]
        lengths = kept[:, 2].float()
        metrics["completions/mean_length"].append(lengths.mean().item())
        metrics["completions/min_length"].append(lengths.min().item())
        metrics["completions/max_length"].append(lengths.max().item())
        stop_ids = torch.tensor([*self.eos_token_ids, self._tokenizer.pad_token_id], device=kept.device)
        is_truncated = ~torch.isin(kept[:, 3], stop_ids)
        metrics["completions/clipped_ratio"].append(is_truncated.float().mean().item())
        terminated = lengths[~is_truncated]
        if terminated.numel() == 0:
            terminated = torch.zeros(1, device=kept.device)
        metrics["completions/mean_terminated_length"].append(terminated.mean().item())
        metrics["completions/min_terminated_length"].append(terminated.min().item())
        metrics["completions/max_terminated_length"].append(terminated.max().item())

    def _on_empty_batch(self, mode: str, num_groups: int, reasons: Sequence[str]) -> None:
        causes = "; ".join(sorted(set(reasons))[:5]) or "every group came back short"
        if mode != "train":
            logger.warning("All %d prompt groups of this evaluation batch were dropped (%s).", num_groups, causes)
            return
        self._consecutive_empty_batches += 1
        limit = self.args.generation_max_consecutive_empty_batches
        if self._consecutive_empty_batches >= limit:
            raise RuntimeError(
                f"Generation produced no usable prompt group in {self._consecutive_empty_batches} consecutive batches "
                f"(generation_max_consecutive_empty_batches={limit}); stopping instead of training on nothing. "
                f"Last causes on this process: {causes}."
            )
        logger.warning(
            "All %d prompt groups of this generation batch were dropped (%s); this batch makes no parameter update "
            "(%d/%d consecutive empty batches allowed).",
            num_groups,
            causes,
            self._consecutive_empty_batches,
            limit,
        )

    # ------------------------------------------------------------------------------------------------ rewards
    def _calculate_rewards(self, inputs: list, prompts: list, completions: list, completion_ids_list: list):
        if self._precomputed_rewards is not None:  # dynamic sampling already scored the final rows
            rewards_per_func, self._precomputed_rewards = self._precomputed_rewards, None
            self._last_rewards_per_func = rewards_per_func
            return rewards_per_func
        keep = self._global_row_keep
        if keep is None or bool(keep.all()):
            rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        else:
            with silence_unscorable_warning():
                rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            keep = keep.to(rewards_per_func.device)
            unscorable_kept = torch.isnan(rewards_per_func).all(dim=1) & keep
            if bool(unscorable_kept.any()):
                logger.warning(
                    "Every reward function returned None for %d kept completions; they are treated as unscorable.",
                    int(unscorable_kept.sum()),
                )
            # Reward models (nn.Module) score every row; a dropped row is not data, whatever they returned.
            rewards_per_func[~keep] = torch.nan
        self._last_rewards_per_func = rewards_per_func
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: list) -> dict[str, Any]:
        self._current_inputs = inputs  # dynamic sampling replaces rows (prompt and columns together) in place
        output = super()._generate_and_score_completions(inputs)
        if self.listwise is not None:
            mode = "train" if self.model.training else "eval"
            output["advantages"] = self.listwise.advantages(self, output, mode)
        return output

    def _compute_loss(self, model, inputs):
        loss = super()._compute_loss(model, inputs)
        if self.listwise is not None and self.model.training and self.beta != 0.0:
            self.listwise.observe_kl(self._metrics["train"]["kl"][-1])
        return loss

    # ------------------------------------------------------------------------------------ no update on nothing
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self.model.training and bool(inputs["num_items_in_batch"] > 0):
            self._window_has_data = True
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    def create_optimizer(self, *args: Any, **kwargs: Any) -> torch.optim.Optimizer:
        optimizer = super().create_optimizer(*args, **kwargs)
        optimizer.register_step_pre_hook(self._skip_empty_update)
        optimizer.register_step_post_hook(self._reset_update_window)
        return optimizer

    def _skip_empty_update(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        """Remove all gradients before a step whose micro-batches held no kept row, so no parameter moves."""
        if self._window_has_data:
            return
        for group in optimizer.param_groups:
            for param in group["params"]:
                param.grad = None

    def _reset_update_window(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._window_has_data = False

    # ------------------------------------------------------------------------------------------- checkpoints
    def _save_checkpoint(self, model, trial) -> None:
        super()._save_checkpoint(model, trial)
        if self.listwise is not None and self.args.should_save:
            folder = os.path.join(
                self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            )
            with open(os.path.join(folder, CONTROLLER_STATE_FILE), "w") as handle:
                json.dump(self.listwise.state_dict(self), handle)

    def _load_optimizer_and_scheduler(self, checkpoint) -> None:
        super()._load_optimizer_and_scheduler(checkpoint)
        if self.listwise is not None and checkpoint is not None:
            path = os.path.join(checkpoint, CONTROLLER_STATE_FILE)
            if os.path.exists(path):
                with open(path) as handle:
                    self.listwise.load_state_dict(self, json.load(handle))
