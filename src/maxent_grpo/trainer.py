"""`MaxEntGRPOTrainer`: TRL's `GRPOTrainer` with robust generation backends and the MaxEnt listwise objective."""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import json
import logging
import os
import shutil
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer
from trl.trainer.utils import nanmax, nanmin, nanstd

from maxent_grpo.config import maxent_config_from
from maxent_grpo.objective.listwise import ListwiseObjective
from maxent_grpo.training.checkpoints.resume import latest_complete_checkpoint
from maxent_grpo.training.checkpoints.save_errors import WRITE_ERRORS, SaveError, save_error
from maxent_grpo.training.dynamic_sampling import DynamicSampler, RefillOutcome
from maxent_grpo.training.generation.backends import (
    GenerationBackend,
    TransformersBackend,
    VLLMColocateBackend,
    VLLMServerBackend,
    colocate_engine,
)
from maxent_grpo.training.generation.backends.protocol import Completion
from maxent_grpo.training.generation.completion_format import format_completions
from maxent_grpo.training.generation.rows import GeneratedRows
from maxent_grpo.training.generation.step import Collectives, GenerationStep, GroupAgreement, StepMetrics
from maxent_grpo.training.kept_rows import ROW_KEEP_KEY, metric_collectives, select_rows
from maxent_grpo.training.reference_model import built_in_process, reference_from_policy
from maxent_grpo.training.reward_masking import mask_dropped_rows, silence_unscorable_warning

logger = logging.getLogger(__name__)

CONTROLLER_STATE_FILE = "maxent_controllers.json"


class NoUsableGenerationError(RuntimeError):
    """Training stopped, or ended, without one usable prompt group: the model was not trained on anything."""


#: TRL loss types whose normaliser is per micro-batch (rows, or tokens for bnpo), see `_close_window`.
PER_MICRO_BATCH_LOSSES = frozenset({"grpo", "bnpo", "dr_grpo", "sapo", "luspo"})


class MaxEntGRPOTrainer(GRPOTrainer):
    """GRPO whose generation goes through a backend and the retry / aggregate / drop helpers.

    Hooks overridden (everything else is TRL 1.16's `GRPOTrainer`):

    - `_generate`: asks the backend for each prompt group, retries short groups for their deficit, drops groups that
      stay incomplete on every process alike, and returns TRL's tuple built from the backend's own prompt ids.
    - `_calculate_rewards`: reward functions only ever see kept rows; dropped rows score NaN (unscorable).
    - `_generate_and_score_completions`: with ``maxent_objective="listwise"``, replaces the advantages by the MaxEnt
      listwise ones and steps the tau / beta controllers.
    - `_compute_loss`: TRL's loss, normalisers and metrics on the kept rows of each micro-batch only.
    - `_clip_grad_norm` / `_get_grad_norm`: close each optimizer window before clipping: no gradient when no
      micro-batch held a kept row (no parameter changes), else a mean over the micro-batches that held some.
    - `train`: ``resume_from_checkpoint=True`` takes the latest *complete* checkpoint (partial ones skipped); a run
      in which every generation batch was dropped raises `NoUsableGenerationError` at its end instead of returning
      as if it had trained.
    - `_save_checkpoint` / `_load_optimizer_and_scheduler`: controller state travels with checkpoints; a checkpoint
      whose saving failed (full disk, Ctrl-C) is removed rather than left looking complete, and a write failure is
      raised as `SaveError`.
    - `_issue_warnings_after_load`: no "missing keys" warning for tied weights a checkpoint rightly leaves out.

    With ``beta != 0``, a model built in-process (no name to load it again) gets its copy as the reference model,
    where TRL can only load the reference by name (see `maxent_grpo.training.reference_model`). With vLLM colocate,
    the engine TRL builds runs in ``vllm_dtype`` (see `maxent_grpo.training.generation.backends.colocate_engine`).

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
        config = positional[2] if len(positional) > 2 else kwargs["args"]
        if config.use_vllm and config.vllm_mode == "colocate" and config.vllm_tensor_parallel_size > 1:
            raise ValueError("vllm_tensor_parallel_size > 1 is not supported by MaxEntGRPOTrainer's colocate backend.")
        with contextlib.ExitStack() as building:
            # TRL builds the reference model (beta != 0) by name only; a model built in-process gets its copy instead.
            if built_in_process(model):
                building.enter_context(reference_from_policy(model))
            if config.use_vllm and config.vllm_mode == "colocate" and importlib.util.find_spec("vllm") is not None:
                if config.vllm_enable_sleep_mode:
                    colocate_engine.check_sleep_mode()
                dtype = partial(
                    colocate_engine.engine_dtype_name, config.vllm_dtype, bf16=config.bf16, fp16=config.fp16
                )
                building.enter_context(colocate_engine.engine_dtype(lambda: dtype(self.model)))
            super().__init__(*positional, **kwargs)
        if generation_backend is not None and not isinstance(generation_backend, GenerationBackend):
            raise TypeError(f"generation_backend {generation_backend!r} has no generate(prompts, counts) method.")
        self.generation_backend = generation_backend if generation_backend is not None else self._default_backend()
        if not hasattr(self, "_last_loaded_step"):
            self._last_loaded_step = -1
        self._row_keep: list[bool] | None = None
        self._global_row_keep: torch.Tensor | None = None
        self._last_completion_texts: list[str] = []
        self._last_rewards_per_func: torch.Tensor | None = None
        self._consecutive_empty_batches = 0
        self._train_batches = {"generated": 0, "kept": 0}  # generation batches of the current `train` call
        self._window_units = 0  # (process, micro-batch) pairs with a kept row in this optimizer window
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

    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs: Any) -> Any:
        """`Trainer.train`, with two differences.

        ``resume_from_checkpoint=True`` skips checkpoints whose save did not finish: Transformers resumes from the
        highest `checkpoint-<step>` of `output_dir` even without its `trainer_state.json` (a save cut short by a full
        disk or a killed job) and then fails after loading the weights; here such a checkpoint is skipped with a
        warning and the latest complete one is used.

        A run in which every generation batch was dropped, or that ended before reaching `max_steps` without
        generating at all (a data set that yields no full batch), raises `NoUsableGenerationError`: fewer empty
        batches than `generation_max_consecutive_empty_batches` do not stop a run, so a short run could otherwise end
        normally, and save, without a single parameter update.
        """
        if resume_from_checkpoint is True:
            checkpoint = latest_complete_checkpoint(Path(self.args.output_dir))
            if checkpoint is None:
                raise ValueError(f"No complete checkpoint found in output directory ({self.args.output_dir}).")
            resume_from_checkpoint = str(checkpoint)
        self._train_batches = {"generated": 0, "kept": 0}
        output = super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)
        generated = self._train_batches["generated"]
        if generated and not self._train_batches["kept"]:
            raise NoUsableGenerationError(
                f"every one of the {generated} generation batches of this run was dropped (no prompt group came back "
                "complete after retries), so no parameter was updated; the warnings above name the causes"
            )
        if not generated and self.state.global_step < self.state.max_steps:
            raise NoUsableGenerationError(
                f"training stopped at step {self.state.global_step} of {self.state.max_steps} without a single "
                "generation batch: the training data yielded no full batch (fewer distinct prompts than one "
                "generation batch needs: generation_batch_size / num_generations)"
            )
        return output

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
            "structured_outputs_regex": args.vllm_structured_outputs_regex,
            "weight_sync": self.vllm_generation.sync_weights,
        }
        if self.vllm_mode == "colocate":
            if colocate_engine.engine_on_cpu():
                sampling["weight_sync"] = colocate_engine.ReloadWeightSync(self.vllm_generation)
            llm = self.vllm_generation.llm
            return VLLMColocateBackend(
                llm,
                self._tokenizer,
                sleep_mode=args.vllm_enable_sleep_mode,
                max_model_len=llm.llm_engine.model_config.max_model_len,
                **sampling,
            )
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
        """Why a completion is unusable (I5), or None: failed, empty, ids outside the tokenizer's vocabulary, or
        without the sampler logprobs TRL's importance-sampling correction needs (one such row would leave the whole
        batch without them)."""
        vocab_size = self._vocab_size
        if completion.failed:
            return "backend marked the completion as failed"
        if completion.logprobs is None and self.use_vllm and self.vllm_importance_sampling_correction:
            return "no sampler logprobs (vllm_importance_sampling_correction needs them)"
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

    def _generation_step(self, group_size: int) -> GenerationStep:
        return GenerationStep(
            self.generation_backend,
            check=self._check_completion,
            collectives=Collectives.of(self.accelerator),
            group_size=group_size,
            max_retry_rounds=self.args.generation_max_retries,
            placeholder_prompt_id=self._tokenizer.pad_token_id,
            placeholder_completion_id=self.eos_token_ids[0],
            step_timeout=self.args.generation_step_timeout,
        )

    def _generate(self, prompts: list) -> tuple:
        mode = "train" if self.model.training else "eval"
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        self._sync_backend_weights()
        step = self._generation_step(group_size)
        batch = step.collect(copy.deepcopy(prompts))
        agreement = step.agree(batch)
        if self.dynamic_sampler is not None and mode == "train":
            refilled = step.refill(batch, agreement, self.dynamic_sampler, self._current_inputs, self._score_rows)
            agreement, self._precomputed_rewards = refilled.agreement, refilled.rewards_per_func
            prompts[:] = copy.deepcopy(batch.prompts)  # TRL scores and logs the caller's list: the replaced prompts
            self._log_refill(refilled.outcome)

        rows = step.assemble(batch, agreement)
        self._row_keep = rows.keep
        self._global_row_keep = agreement.global_keep
        self._last_completion_texts = rows.texts
        self._log_generation_metrics(mode, step.metrics(batch, agreement, self._stop_ids))
        kept_any = bool(agreement.group_kept.any())
        if mode == "train":
            self._train_batches["generated"] += 1
            self._train_batches["kept"] += int(kept_any)
        if not kept_any:
            self._on_empty_batch(mode, len(agreement.group_kept), batch.reasons)
        elif mode == "train":
            self._consecutive_empty_batches = 0
        tool_mask = (
            None
            if all(rows.keep)
            else [[int(k)] * len(ids) for k, ids in zip(rows.keep, rows.completion_ids, strict=True)]
        )
        completions = self._format_completions(batch.prompts, rows)
        return rows.prompt_ids, rows.completion_ids, tool_mask, completions, rows.logprobs, {}, None, []

    @property
    def _stop_ids(self) -> list[int]:
        return [*self.eos_token_ids, self._tokenizer.pad_token_id]

    def _format_completions(self, prompts: Sequence[Any], rows: GeneratedRows) -> list:
        return format_completions(
            self._tokenizer, prompts, rows.prompt_ids, rows.completion_ids, rows.texts, rows.keep
        )

    def _score_rows(
        self, prompts: list, rows: GeneratedRows, agreement: GroupAgreement, rows_to_score: Sequence[bool]
    ) -> torch.Tensor:
        """Dynamic sampling's scorer: TRL's reward functions on the kept rows marked in ``rows_to_score``.

        Columns that reward functions log through ``log_extra`` keep, for rows not scored this round, the values of
        the round that scored them.
        """
        self._row_keep = [k and s for k, s in zip(agreement.keep, rows_to_score, strict=True)]
        earlier = {column: list(values) for column, values in self._pending_extra_logs.items()}
        self._pending_extra_logs.clear()
        with silence_unscorable_warning():
            rewards_per_func = GRPOTrainer._calculate_rewards(
                self,
                self._current_inputs,
                prompts,
                self._format_completions(prompts, rows),
                rows.completion_ids,
            )
        num_rows = len(rows_to_score)
        for column in set(earlier) | set(self._pending_extra_logs):
            fresh = self._pending_extra_logs.get(column) or [None] * num_rows
            previous = earlier.get(column) or [None] * num_rows
            self._pending_extra_logs[column] = [
                new if scored else old for new, old, scored in zip(fresh, previous, rows_to_score, strict=True)
            ]
        return rewards_per_func

    def _log_refill(self, outcome: RefillOutcome) -> None:
        metrics = self._metrics["train"]
        metrics["dynamic_sampling/filtered_groups"].append(float(outcome.filtered_groups))
        metrics["dynamic_sampling/rounds"].append(float(outcome.rounds))
        metrics["dynamic_sampling/generated_groups"].append(
            outcome.generated_groups / max(outcome.groups_with_signal, 1)
        )

    def _log_generation_metrics(self, mode: str, step_metrics: StepMetrics) -> None:
        """Log the robustness counters, and TRL's completion metrics over kept rows only (absent when none)."""
        metrics = self._metrics[mode]
        for name, value in step_metrics.values.items():
            metrics[name].append(value)
        if mode == "train":
            self.state.num_input_tokens_seen += step_metrics.kept_tokens
        metrics["num_tokens"] = [self.state.num_input_tokens_seen]

    def _on_empty_batch(self, mode: str, num_groups: int, reasons: Sequence[str]) -> None:
        causes = "; ".join(sorted(set(reasons))[:5]) or "every group came back short"
        if mode != "train":
            logger.warning("All %d prompt groups of this evaluation batch were dropped (%s).", num_groups, causes)
            return
        self._consecutive_empty_batches += 1
        limit = self.args.generation_max_consecutive_empty_batches
        if self._consecutive_empty_batches >= limit:
            raise NoUsableGenerationError(
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
        mode = "train" if self.model.training else "eval"
        logged_before = {name: len(values) for name, values in self._metrics[mode].items()}
        output = super()._generate_and_score_completions(inputs)
        global_keep = self._global_row_keep
        output[ROW_KEEP_KEY] = torch.tensor(self._row_keep, dtype=torch.bool, device=self.accelerator.device)
        if self.listwise is not None:
            output["advantages"] = self.listwise.advantages(self, output, mode)
        if global_keep is not None and not bool(global_keep.all()):
            self._restrict_batch_metrics(mode, output, global_keep, logged_before)
        return output

    def _restrict_batch_metrics(
        self, mode: str, output: dict[str, Any], global_keep: torch.Tensor, logged_before: dict[str, int]
    ) -> None:
        """Recompute over kept rows the batch metrics TRL computed over every row, and forget placeholder rows."""
        metrics = self._metrics[mode]
        if not bool(global_keep.any()):  # nothing was data: reward and sampling metrics are absent, not NaN or 0
            names = [name for name in metrics if name.startswith(("reward", "frac_reward_zero_std", "sampling/"))]
            self._forget_metrics(mode, names, logged_before)
        else:
            self._restrict_zero_std_fraction(metrics, global_keep)
            if self.use_vllm and self.vllm_importance_sampling_correction:
                self._restrict_sampling_metrics(metrics, output)
        keep = global_keep.tolist()
        columns = [self._logs["prompt"], self._logs["completion"], self._logs["advantages"], self._logs["images"]]
        columns += [*self._logs["rewards"].values(), *self._logs["extra"].values()]
        for column in columns:
            if len(column) >= len(keep):
                tail = [column.pop() for _ in keep][::-1]
                column.extend(value for value, kept in zip(tail, keep, strict=True) if kept)

    def _forget_metrics(self, mode: str, names: list[str], logged_before: dict[str, int]) -> None:
        """Remove the values of ``names`` logged since ``logged_before`` (a metric left without values is absent)."""
        metrics = self._metrics[mode]
        for name in names:
            del metrics[name][logged_before.get(name, 0) :]
            if not metrics[name]:
                del metrics[name]

    def _restrict_zero_std_fraction(self, metrics: dict[str, list[float]], global_keep: torch.Tensor) -> None:
        """`frac_reward_zero_std` over kept groups: TRL counts a dropped (all-NaN) group as having spread."""
        group_size = self.num_generations if self.model.training else self.num_generations_eval
        per_group = self.multi_objective_aggregation == "sum_then_normalize" and self.scale_rewards != "batch"
        if not per_group or group_size < 2:
            return
        rewards_per_func = self._last_rewards_per_func
        weights = self.reward_weights.to(rewards_per_func.device)
        rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
        rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        std = nanstd(rewards.view(-1, group_size), dim=1)
        group_kept = global_keep.view(-1, group_size).all(dim=1).to(std.device)
        zero = torch.isclose(std, torch.zeros_like(std))[group_kept]
        metrics["frac_reward_zero_std"][-1] = zero.float().mean().item()

    def _restrict_sampling_metrics(self, metrics: dict[str, list[float]], output: dict[str, Any]) -> None:
        """TRL's `sampling/*` statistics over kept rows, a process without any left out (TRL counts it as 0, and
        counts a placeholder's sequence-level ratio as 1.0)."""
        keep = output[ROW_KEEP_KEY]
        mask = output["completion_mask"].bool() & keep.unsqueeze(1)
        if "tool_mask" in output:
            mask &= output["tool_mask"].bool()
        delta = torch.abs(output["old_per_token_logps"] - output["sampling_per_token_logps"])
        delta = delta[mask & ~torch.isnan(delta)]
        ratio = output["importance_sampling_ratio"]
        ratio = ratio[keep].flatten() if ratio.shape[1] == 1 else ratio[mask]

        def local_stats(values: torch.Tensor, *reducers: str) -> list[torch.Tensor]:
            if values.numel() == 0:
                return [values.new_tensor(torch.nan) for _ in reducers]
            return [getattr(values.float(), reducer)() for reducer in reducers]

        local = torch.stack([*local_stats(delta, "mean", "max"), *local_stats(ratio, "min", "mean", "max")])
        gathered = self.accelerator.gather(local.unsqueeze(0).float())
        values = {
            "sampling/sampling_logp_difference/mean": gathered[:, 0].nanmean(),
            "sampling/sampling_logp_difference/max": nanmax(gathered[:, 1]),
            "sampling/importance_sampling_ratio/min": nanmin(gathered[:, 2]),
            "sampling/importance_sampling_ratio/mean": gathered[:, 3].nanmean(),
            "sampling/importance_sampling_ratio/max": nanmax(gathered[:, 4]),
        }
        for name, value in values.items():
            metrics[name][-1] = value.item()

    # ------------------------------------------------------------------------------------------------- loss
    def _compute_loss(self, model, inputs):
        """TRL's loss on the kept rows of this micro-batch only (see `training.kept_rows`)."""
        mode = "train" if self.model.training else "eval"
        keep = inputs[ROW_KEEP_KEY]
        kept_rows = self.accelerator.gather(keep.sum().reshape(1).to(self.accelerator.device))
        total_kept = int(kept_rows.sum().item())
        if mode == "train":
            self._window_units += int((kept_rows > 0).sum().item())
        entropy_control = (self.entropy_coef, self._last_world_entropy)
        kl_logged = len(self._metrics[mode].get("kl", ()))
        if bool((kept_rows == keep.numel()).all()):
            loss = super()._compute_loss(model, inputs)
        else:
            local_kept = int(keep.sum().item())
            rows = keep.nonzero().flatten() if local_kept else torch.zeros(1, dtype=torch.long, device=keep.device)
            logged_before = {name: len(values) for name, values in self._metrics[mode].items()}
            with metric_collectives(
                self.accelerator,
                contributes=local_kept > 0,
                rows=max(int(kept_rows.max().item()), 1),
                keep_reduce=lambda tensor: tensor is self._entropy_window_stats,
            ):
                loss = super()._compute_loss(model, select_rows(inputs, rows))
            if local_kept == 0:
                loss = loss * 0.0
            if total_kept == 0:  # no process held data: the metrics TRL just logged describe placeholders
                self._forget_metrics(mode, list(self._metrics[mode]), logged_before)
        if mode == "train" and self._window_units == 0 and self.accelerator.sync_gradients:
            # TRL's adaptive entropy control closes its window here: a window without a kept token measures nothing.
            self.entropy_coef, self._last_world_entropy = entropy_control
        if self.listwise is not None and mode == "train" and len(self._metrics[mode].get("kl", ())) > kl_logged:
            self.listwise.observe_kl(self._metrics[mode]["kl"][-1])
        return loss

    # ------------------------------------------------------------------------------------- optimizer windows
    def _clip_grad_norm(self, model):
        self._close_window(model)
        return super()._clip_grad_norm(model)

    def _get_grad_norm(self, model, grad_norm=None):
        if grad_norm is None:  # no clipping this run: `_clip_grad_norm` was not called
            self._close_window(model)
        return super()._get_grad_norm(model, grad_norm=grad_norm)

    def _close_window(self, model: torch.nn.Module) -> None:
        """Finish the gradient of an optimizer window, before clipping and the optimizer step (I6).

        A window in which no process held a kept row in any micro-batch gets no gradient at all, so the optimizer
        changes no parameter (no momentum or weight-decay step either). Otherwise, for the loss types TRL normalises
        per micro-batch, the gradient becomes the mean over the (process, micro-batch) units that held kept rows
        (TRL's own mean over micro-batches and processes when nothing is dropped): a unit without data would
        otherwise count as a zero and shrink the step. dapo, cispo and vespo are normalised by the window's kept
        token count already.
        """
        units, self._window_units = self._window_units, 0
        parameters = list(model.parameters())
        if units == 0:
            for parameter in parameters:
                parameter.grad = None
            return
        if self.loss_type not in PER_MICRO_BATCH_LOSSES:
            return
        factor = self.accelerator.num_processes * self.current_gradient_accumulation_steps / units
        if factor != 1.0:
            for parameter in parameters:
                if parameter.grad is not None:
                    parameter.grad.mul_(factor)

    # ------------------------------------------------------------------------------------------- checkpoints
    def _save_checkpoint(self, model, trial) -> None:
        """Also write one JSON file: the listwise controllers' state at its top level, the dynamic sampler's under
        its own key (each only when in use). It is written first, so a checkpoint with `trainer_state.json` (written
        last by the Trainer, which then deletes checkpoints beyond `save_total_limit`) always has it. A checkpoint
        folder this call created and could not complete is removed when saving fails, so that a partial checkpoint
        never looks like one to resume from; a complete one is kept."""
        folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        existed = os.path.exists(folder)
        try:
            self._save_checkpoint_files(model, trial, folder)
        except BaseException as error:  # also KeyboardInterrupt: re-raised once the partial folder is gone
            complete = os.path.exists(os.path.join(folder, TRAINER_STATE_NAME))
            remove = not existed and not complete and self.args.should_save
            failure = None
            if isinstance(error, WRITE_ERRORS) and not isinstance(error, SaveError):  # free space measured first
                what = f"checkpoint {folder}" + (" (the partial folder was removed)" if remove else "")
                failure = save_error(what, folder, error)
            if remove:
                shutil.rmtree(folder, ignore_errors=True)
            if failure is not None:
                raise failure from error
            raise

    def _save_checkpoint_files(self, model, trial, folder: str) -> None:
        state = {} if self.listwise is None else self.listwise.state_dict(self)
        if self.dynamic_sampler is not None:
            state[DynamicSampler.checkpoint_key] = self.dynamic_sampler.state_dict()
        if state and self.args.should_save:
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, CONTROLLER_STATE_FILE), "w") as handle:
                json.dump(state, handle)
        super()._save_checkpoint(model, trial)

    def _issue_warnings_after_load(self, load_result: Any) -> None:
        """Transformers' warning, less the tied weights a checkpoint rightly leaves out.

        A tied parameter (`lm_head.weight` sharing `model.embed_tokens.weight`) is saved once, so loading a
        checkpoint reports it missing. Transformers' check only knows `_keys_to_ignore_on_save`, empty for tied models
        since transformers 5, and so warns "There were missing keys in the checkpoint model loaded:
        ['lm_head.weight']" on every resume although nothing is lost. A missing key is left out of the warning only
        when it is a tied parameter that really is the same tensor as a parameter that was loaded.
        """
        tied = getattr(self.model, "all_tied_weights_keys", None) or {}
        parameters = dict(self.model.named_parameters(remove_duplicate=False))
        missing = set(load_result.missing_keys)

        def restored_by_tie(key: str) -> bool:
            source = tied.get(key)
            return (
                source is not None
                and source not in missing
                and key in parameters
                and parameters[key] is parameters.get(source)
            )

        kept = [key for key in load_result.missing_keys if not restored_by_tie(key)]
        super()._issue_warnings_after_load(load_result._replace(missing_keys=kept))

    def _load_optimizer_and_scheduler(self, checkpoint) -> None:
        """Also restore what `_save_checkpoint` wrote (a file holding only listwise keys reads the same way)."""
        super()._load_optimizer_and_scheduler(checkpoint)
        path = None if checkpoint is None else os.path.join(checkpoint, CONTROLLER_STATE_FILE)
        if path is None or not os.path.exists(path):
            return
        with open(path) as handle:
            state = json.load(handle)
        sampler_state = state.pop(DynamicSampler.checkpoint_key, None)
        if self.dynamic_sampler is not None and sampler_state is not None:
            self.dynamic_sampler.load_state_dict(sampler_state)
        if self.listwise is not None and state:
            self.listwise.load_state_dict(self, state)
