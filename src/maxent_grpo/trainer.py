"""`MaxEntGRPOTrainer`: TRL's `GRPOTrainer` with robust generation backends and the MaxEnt listwise objective."""

from __future__ import annotations

import contextlib
import importlib.util
import os
from functools import partial
from pathlib import Path
from typing import Any

import torch
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer

from maxent_grpo.collectives import Collectives
from maxent_grpo.config import maxent_config_from
from maxent_grpo.objective.listwise import ListwiseObjective
from maxent_grpo.training import metric_restriction
from maxent_grpo.training.checkpoints import extra_state
from maxent_grpo.training.checkpoints.resume import latest_complete_checkpoint
from maxent_grpo.training.combination_checks import check_combinations
from maxent_grpo.training.dynamic_sampling import DynamicSampler
from maxent_grpo.training.empty_batches import EmptyBatchGuard, NoUsableGenerationError
from maxent_grpo.training.entropy_bonus import scaled_entropy_bonus
from maxent_grpo.training.generation.async_generation import AsyncGeneration
from maxent_grpo.training.generation.backends import colocate_engine
from maxent_grpo.training.generation.backends.rollout_function import RolloutFunctionBackend
from maxent_grpo.training.generation.backends.selection import (
    build_backend,
    server_api_key,
    server_urls,
)
from maxent_grpo.training.generation.batch_state import GenerationBatchState
from maxent_grpo.training.generation.contract import capabilities
from maxent_grpo.training.generation.contract.protocol import GenerationBackend
from maxent_grpo.training.generation.episodes.trainer_setup import (
    context_length,
    episode_settings,
    take_over_environments,
)
from maxent_grpo.training.generation.server_client import trl_client
from maxent_grpo.training.generation.staged_weights import FinishStagedWeights
from maxent_grpo.training.generation.trainer_step import generate_batch
from maxent_grpo.training.kept_rows import ROW_KEEP_KEY, metric_collectives, select_rows
from maxent_grpo.training.listwise_rollout import rollout_batch
from maxent_grpo.training.optimizer_window import WindowPlan, WindowPlanner, step_engine_owned_scheduler
from maxent_grpo.training.reference_model import built_in_process, reference_from_policy
from maxent_grpo.training.reward_masking import (
    silence_unscorable_warning,
    unscore_dropped_rows,
    warn_unscorable_rows,
)
from maxent_grpo.training.reward_scoring.trainer_hooks import recount_kept_tokens, settle_batch, wrap_reward_functions
from maxent_grpo.training.tied_embeddings import check_tied_output_layer

__all__ = ["MaxEntGRPOTrainer", "NoUsableGenerationError"]


class MaxEntGRPOTrainer(GRPOTrainer):
    """GRPO whose generation goes through a backend and the retry / aggregate / drop helpers.

    Hooks overridden (everything else is TRL 1.16's `GRPOTrainer`):

    - `_generate`: asks the backend for each prompt group, retries short groups for their deficit, drops groups that
      stay incomplete on every process alike, and returns TRL's tuple built from the backend's own prompt ids. With
      ``tools`` or ``environment_factory`` each completion slot is a multi-turn episode whose every turn goes through
      the backend (`training.generation.episodes`); a failed episode is a missing slot. A ``rollout_func`` is the
      backend (`backends.rollout_function`).
    - `_calculate_rewards`: reward functions only ever see kept rows; dropped rows score NaN (unscorable). A reward
      function's return that TRL cannot train on (a wrong count, not a number, NaN, infinity) raises
      `RewardContractError` naming the function (`training.reward_contract`). Each call is bounded by
      ``reward_timeout`` and retried on transient errors; rows a call could not score leave the batch as dropped rows
      do, and a function failing on every call too long stops the run (`training.reward_scoring`).
    - `_generate_and_score_completions`: with ``maxent_objective="listwise"``, replaces the advantages by the MaxEnt
      listwise ones and steps the tau / beta controllers.
    - `_compute_loss`: TRL's loss, normalisers and metrics on the kept rows of each micro-batch only.
    - `get_batch_samples` / `_prepare_inputs` / `training_step`: each optimizer window's generation batches are
      generated at its first micro-batch and the window is planned from their keep masks
      (`training.optimizer_window`): every micro-batch's loss carries the window's factor before its backward (so
      DeepSpeed, FSDP and DDP all step on the corrected gradient), and a window without a kept row on any process
      runs no forward or backward at all (no engine, momentum or weight-decay step). With ``async_generation`` the
      next window's inputs are read ahead and its first generation call is made in the background while this window
      trains; its generation step replays that call and runs the rest as usual (`generation.async_generation`).
    - `train`: ``resume_from_checkpoint=True`` takes the latest *complete* checkpoint (partial ones skipped); a run
      in which every generation batch was dropped raises `NoUsableGenerationError` at its end instead of returning
      as if it had trained.
    - `_save_checkpoint` / `_load_optimizer_and_scheduler`: controller state travels with checkpoints; a checkpoint
      whose saving failed (full disk, Ctrl-C) is removed rather than left looking complete, and a write failure is
      raised as `SaveError` (`training.checkpoints.extra_state`).
    - `_issue_warnings_after_load`: no "missing keys" warning for tied weights a checkpoint rightly leaves out.

    What the generation step decided for a batch (keep masks, texts, rewards) reaches the later hooks through one
    attribute, ``_batch``, a `GenerationBatchState` (`training.generation.batch_state` says which hook reads what).

    While TRL builds: a model built in-process gets its copy as the reference model (`training.reference_model`); a
    colocated vLLM engine runs in ``vllm_dtype`` (`backends.colocate_engine`); TRL's server client waits for the
    server with a line every 30 s and one clear error after ``vllm_server_timeout``, and with the disk weight transfer
    it is built without vLLM and without its NCCL group, so a CPU trainer, or one without vLLM installed, can use a
    server (`server_client.trl_client`).

    All arguments but the two below are `GRPOTrainer`'s, ``tools``, ``environment_factory`` and ``rollout_func``
    included (``rollout_func`` cannot be combined with ``generation_backend``, tools or environments, nor tools with
    ``dynamic_sampling``).

    Args:
        generation_backend: any object implementing `GenerationBackend`. When None, the trainer builds the built-in
            backend that TRL's own fields select (`training.generation.backends.selection`): `TransformersBackend`, or
            with ``use_vllm`` the colocate or server backend over TRL's vLLM machinery.
        args: a `MaxEntGRPOConfig`; a plain `trl.GRPOConfig` (its values, MaxEnt fields at their defaults); or None,
            for the default `GRPOTrainer` would build (see `maxent_config_from`).
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
        config = positional[2] if len(positional) > 2 else kwargs["args"]
        #: The weight transfer agreed with the vLLM server in server mode ("disk" or "nccl"), else None.
        self.weight_transfer = check_combinations(config, generation_backend, kwargs)
        capabilities.check_backend(generation_backend)
        colocate = config.use_vllm and config.vllm_mode == "colocate"
        with contextlib.ExitStack() as building:
            # TRL builds the reference model (beta != 0) by name only; a model built in-process gets its copy instead.
            if built_in_process(model):
                building.enter_context(reference_from_policy(model))
            if colocate and importlib.util.find_spec("vllm") is not None:
                if config.vllm_enable_sleep_mode:
                    colocate_engine.check_sleep_mode()
                dtype = partial(
                    colocate_engine.engine_dtype_name, config.vllm_dtype, bf16=config.bf16, fp16=config.fp16
                )
                building.enter_context(colocate_engine.engine_dtype(lambda: dtype(self.model)))
            if config.use_vllm and config.vllm_mode == "server":
                disk = self.weight_transfer == "disk"
                building.enter_context(
                    trl_client.server_client(disk=disk, api_key=server_api_key(config), base_urls=server_urls(config))
                )
            super().__init__(*positional, **kwargs)
        check_tied_output_layer(self.model)
        self.generation_backend = generation_backend if generation_backend is not None else build_backend(self)
        if self.rollout_func is not None:
            self.generation_backend = RolloutFunctionBackend(
                self.rollout_func,
                self,
                partial(self._tokenizer.decode, skip_special_tokens=True),
                len(self._tokenizer),
                weights=self.generation_backend,
            )
        self.environment_pool = take_over_environments(self)
        self.episode_settings = (
            episode_settings(self, self.environment_pool, context_length(self))
            if self.tools or self.environment_pool is not None
            else None
        )
        self._last_loaded_step = getattr(self, "_last_loaded_step", -1)
        self._staged_step = -1  # the optimizer step whose weights the backend staged (`_stage_backend_weights`)
        self._batch: GenerationBatchState | None = None  # the current batch's; None before the first
        self._empty_batches = EmptyBatchGuard(self.args.generation_max_consecutive_empty_batches)
        self._windows = WindowPlanner(self._prepare_at, self._plan_of)
        # A reward function sees kept rows only, what it returns for them is checked (`RewardContractError`), and its
        # calls are bounded and retried; rows it could not score leave the batch (`training.reward_scoring`).
        self._reward_ledger = wrap_reward_functions(self, lambda: None if self._batch is None else self._batch.keep)
        listwise = self.args.maxent_objective == "listwise"
        self.listwise = ListwiseObjective.from_config(self.args, self._tokenizer) if listwise else None
        self.dynamic_sampler = DynamicSampler.of(self) if self.args.dynamic_sampling else None
        self.async_generation = AsyncGeneration.of(self) if self.args.async_generation else None
        # First: a user's callback sees the weights as the optimizer does.
        self.callback_handler.callbacks.insert(0, FinishStagedWeights(lambda: self.generation_backend))

    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs: Any) -> Any:
        """`Trainer.train`, except that ``resume_from_checkpoint=True`` skips checkpoints whose save did not finish
        (see `training.checkpoints.resume`) and that a run that never trained on anything raises
        `NoUsableGenerationError` (see `training.empty_batches`)."""
        if resume_from_checkpoint is True:
            checkpoint = latest_complete_checkpoint(Path(self.args.output_dir))
            if checkpoint is None:
                raise ValueError(f"No complete checkpoint found in output directory ({self.args.output_dir}).")
            resume_from_checkpoint = str(checkpoint)
        self._empty_batches.start_run()
        try:
            output = super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)
        finally:
            if self.async_generation is not None:
                self.async_generation.close()
        self._empty_batches.check_run_end(self.state.global_step, self.state.max_steps)
        return output

    # --------------------------------------------------------------------------------------------- generation
    def _stage_backend_weights(self) -> None:
        """With ``async_generation``: write the weights of the optimizer step just taken (`SupportsWeightStaging`)
        while the call made ahead may still be in flight; `_sync_backend_weights` publishes them. Not where no call
        is made ahead after this window (the run's last window, or a next window without generation), which would
        load them: `_sync_backend_weights` writes them there, within the step."""
        step = self.state.global_step
        if step == self._last_loaded_step or step == self._staged_step:
            return
        if self.async_generation is None or not self.async_generation.calls_ahead_after_window(self._in_last_window):
            return
        backend = self.generation_backend
        if isinstance(backend, capabilities.SupportsWeightStaging) and isinstance(
            backend, capabilities.SupportsWeightSync
        ):
            backend.stage_weights(self.accelerator.unwrap_model(self.model))
            self._staged_step = step

    def _sync_backend_weights(self) -> None:
        if self.state.global_step == self._last_loaded_step:
            return
        if isinstance(backend := self.generation_backend, capabilities.SupportsWeightSync):
            if self._staged_step == self.state.global_step and isinstance(backend, capabilities.SupportsWeightStaging):
                backend.publish_staged_weights()
            else:
                backend.sync_weights(self.accelerator.unwrap_model(self.model))
            self.accelerator.wait_for_everyone()
        self._last_loaded_step = self.state.global_step
        if self.async_generation is not None and isinstance(backend, capabilities.SupportsWeightVersion):
            self.async_generation.weights_written(backend.weight_version, self.state.global_step)

    def _generate(self, prompts: list) -> tuple:
        """TRL's `_generate`, its rows from the backend through the generation step (`generation.trainer_step`); what
        the step decided is the batch's state from now on (`self._batch`, read by the later hooks)."""
        generated = generate_batch(self, prompts)
        self._batch, rows = generated.state, generated.rows
        prompts[:] = generated.prompts  # TRL scores and logs the caller's list: the replaced or episodes' prompts
        fields = rows.reward_fields()
        return (
            rows.prompt_ids,
            rows.completion_ids,
            rows.tool_mask(),
            generated.completions,
            rows.logprobs,
            fields,
            None,
            [],
        )

    # ------------------------------------------------------------------------------------------------ rewards
    def _calculate_rewards(self, inputs: list, prompts: list, completions: list, completion_ids_list: list):
        batch = self._batch
        if batch is None:  # outside a batch: nothing was dropped, nothing to record
            return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        rewards_per_func = batch.rewards_per_func  # not None: dynamic sampling already scored the final rows
        if rewards_per_func is None:
            with silence_unscorable_warning():  # TRL's warning comes for kept rows only, from `warn_unscorable_rows`
                rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._batch = batch = settle_batch(self, self._reward_ledger, batch, rewards_per_func)
        warn_unscorable_rows(
            rewards_per_func, batch.global_keep, inputs, prompts, completions, self.accelerator.process_index
        )
        unscore_dropped_rows(rewards_per_func, batch.global_keep)
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: list) -> dict[str, Any]:
        self._batch = GenerationBatchState(inputs)  # dynamic sampling replaces rows (prompt and columns) in place
        self._reward_ledger.start_batch()
        if self.environment_pool is not None:
            # Episodes reset their own environments; `_generate` hands TRL this batch's, for reward functions.
            self.environments = None
            for row in inputs:  # a row naming an unknown environment is bad data, not a failed episode
                self.environment_pool.name_of(row)
            # An environment may own the data: its reset supplies the prompt.
            inputs = [
                row if "prompt" in row else {**row, "prompt": [{"role": "user", "content": ""}]} for row in inputs
            ]
        with metric_restriction.completion_logs_of_one_batch(self._logs) as restrict_completion_logs:
            output = self._score_kept_rows(inputs)
            batch = self._batch
            if batch.dropped_any:
                restrict_completion_logs(batch.global_keep.tolist())
        return output

    def _score_kept_rows(self, inputs: list) -> dict[str, Any]:
        """TRL's generation and scoring, with the listwise advantages and TRL's metrics over kept rows only."""
        mode = "train" if self.model.training else "eval"
        metrics = self._metrics[mode]
        logged_before = {name: len(values) for name, values in metrics.items()}
        output = super()._generate_and_score_completions(inputs)
        batch = self._batch  # what this batch's `_generate` and `_calculate_rewards` decided
        output[ROW_KEEP_KEY] = torch.tensor(batch.keep, dtype=torch.bool, device=self.accelerator.device)
        if self._reward_ledger.left_out_rows:  # TRL counted the loss tokens before scoring left rows out
            recount_kept_tokens(output, output[ROW_KEEP_KEY], self.accelerator.gather)
        if self.listwise is not None:  # the MaxEnt listwise advantages replace TRL's (`objective.listwise`)
            step = self.listwise.step(rollout_batch(self, output, batch), Collectives.of(self.accelerator))
            self.beta, output["advantages"] = step.beta, step.advantages
            for name, value in step.metrics.items():
                metrics[name].append(value)
            metric_restriction.replace_logged_advantages(self._logs, step.all_advantages.tolist())
        if batch.dropped_any:
            group_size = self.num_generations if mode == "train" else self.num_generations_eval
            metric_restriction.restrict_batch_metrics(
                metrics, logged_before, output, batch.global_keep, batch.rewards_per_func, self, group_size
            )
        return output

    # ------------------------------------------------------------------------------------- optimizer windows
    def get_batch_samples(self, epoch_iterator, num_batches, device):
        """The Trainer's window of inputs, kept to be generated and planned at the window's first micro-batch."""
        if self.async_generation is None:
            batch_samples, num_items_in_batch = super().get_batch_samples(epoch_iterator, num_batches, device)
        else:  # the next window's inputs are read ahead too
            batch_samples = self.async_generation.window_inputs(epoch_iterator, num_batches, self._step)
            num_items_in_batch = self._get_num_items_in_batch(batch_samples, device)
        self._windows.start(self._step, batch_samples)
        return batch_samples, num_items_in_batch

    def _prepare_inputs(self, generation_batch: dict[str, Any]) -> dict[str, Any]:
        """TRL's, except that a training window's first micro-batch generates and plans the whole window (inside
        TRL's step timer and after the Trainer's ``model.train()`` / ``optimizer.train()``)."""
        prepared = self._windows.inputs_at(self._step) if self.model.training else None
        if self.async_generation is not None and prepared is not None:  # a window without generation starts it here
            self.async_generation.start_next(None, self._sync_backend_weights, last_window=self._in_last_window)
        return super()._prepare_inputs(generation_batch) if prepared is None else prepared

    def _prepare_at(self, inputs: dict[str, Any], step: int) -> dict[str, Any]:
        """TRL's `_prepare_inputs` as it would run at micro-step ``step`` (TRL decides from it what to generate)."""
        current, self._step = self._step, step
        try:
            return GRPOTrainer._prepare_inputs(self, inputs)
        finally:
            self._step = current

    def _plan_of(self, start: int, prepared: list[dict[str, Any]]) -> WindowPlan:
        gather, device = self.accelerator.gather, self.accelerator.device
        return WindowPlan.of(
            start, prepared, keep_key=ROW_KEEP_KEY, loss_type=self.loss_type, gather=gather, device=device
        )

    @property
    def _in_last_window(self) -> bool:
        return self.state.global_step + 1 >= self.state.max_steps

    @property
    def _in_empty_window(self) -> bool:
        return self.model.training and self._windows.empty_at(self._step)

    def training_step(self, model, inputs, num_items_in_batch=None):
        """TRL's step; in an empty window its loss is a constant and its backward is not run (`optimizer_window`)."""
        accelerator = self.accelerator
        backward = accelerator.backward

        def backward_with_data(loss: torch.Tensor, **kwargs: Any) -> None:
            if not self._in_empty_window:
                backward(loss, **kwargs)
            elif accelerator.sync_gradients:
                step_engine_owned_scheduler(self.lr_scheduler)

        accelerator.backward = backward_with_data
        try:
            return super().training_step(model, inputs, num_items_in_batch)
        finally:
            del accelerator.backward  # the class's method again

    def _get_grad_norm(self, model, grad_norm=None):
        if self._windows.plan is not None and self._windows.plan.empty:  # nothing ran; DeepSpeed reports the last
            return 0.0
        return super()._get_grad_norm(model, grad_norm=grad_norm)

    # ------------------------------------------------------------------------------------------------- loss
    def _compute_loss(self, model, inputs):
        """TRL's loss on the micro-batch's kept rows (`kept_rows`), times its window's factor (`optimizer_window`)."""
        if self._in_empty_window:  # no process holds data: no forward (and, see `training_step`, no backward)
            return torch.zeros((), device=self.accelerator.device)
        mode = "train" if self.model.training else "eval"
        keep = inputs[ROW_KEEP_KEY]
        kept_rows = self.accelerator.gather(keep.sum().reshape(1).to(self.accelerator.device))
        total_kept = int(kept_rows.sum().item())
        kl_logged = len(self._metrics[mode].get("kl", ()))
        loss_factor, entropy_factor = self._windows.factors_at(self._step) if mode == "train" else (1.0, 1.0)
        with scaled_entropy_bonus(self, entropy_factor / loss_factor):
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
                    metric_restriction.forget_placeholder_metrics(self._metrics[mode], logged_before)
        if self.listwise is not None and mode == "train" and len(self._metrics[mode].get("kl", ())) > kl_logged:
            self.listwise.observe_kl(self._metrics[mode]["kl"][-1])
        return loss * loss_factor if loss_factor != 1.0 else loss

    # ------------------------------------------------------------------------------------------- checkpoints
    def _save_checkpoint(self, model, trial) -> None:
        """Also write the controller state file first; a checkpoint this call could not complete is removed (and an
        earlier one it was replacing put back: `extra_state.saving_checkpoint`)."""
        folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        with extra_state.saving_checkpoint(
            folder, writes=self.args.should_save, barrier=self.accelerator.wait_for_everyone
        ):
            state = {} if self.listwise is None else self.listwise.state_dict(self.beta)
            if self.dynamic_sampler is not None:
                state[DynamicSampler.checkpoint_key] = self.dynamic_sampler.state_dict()
            if state and self.args.should_save:
                extra_state.write_extra_state(folder, state)
            super()._save_checkpoint(model, trial)

    def _issue_warnings_after_load(self, load_result: Any) -> None:
        """Transformers' warning, less the tied weights a checkpoint rightly leaves out (see `extra_state`)."""
        kept = extra_state.missing_keys_after_load(self.model, load_result.missing_keys)
        super()._issue_warnings_after_load(load_result._replace(missing_keys=kept))

    def _load_optimizer_and_scheduler(self, checkpoint) -> None:
        """Also restore what `_save_checkpoint` wrote (a file holding only listwise keys reads the same way)."""
        super()._load_optimizer_and_scheduler(checkpoint)
        state = extra_state.read_extra_state(checkpoint)
        if state is None:
            return
        sampler_state = state.pop(DynamicSampler.checkpoint_key, None)
        if self.dynamic_sampler is not None and sampler_state is not None:
            self.dynamic_sampler.load_state_dict(sampler_state)
        if self.listwise is not None and state:
            self.beta = self.listwise.load_state_dict(state)
