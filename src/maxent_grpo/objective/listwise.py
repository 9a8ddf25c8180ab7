"""Wire the MaxEnt listwise objective (`weights`, `controllers`) into a GRPO rollout batch.

The listwise advantages are computed once per rollout batch, on the gathered batch of every process (groups may
straddle processes), from the same rewards TRL just computed, and frozen for the update exactly like TRL's
advantages. Dropped rows, unscorable rows and rows with no unmasked completion token are invalid candidates (weight 0,
advantage 0).

The objective reads a typed `RolloutBatch` and returns a `ListwiseStep` (advantages, metrics, the next beta): it knows
no trainer, so it is tested on hand-made batches; the trainer builds the batch from TRL's output and applies the step.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from maxent_grpo.collectives import Collectives
from maxent_grpo.config import MaxEntGRPOConfig
from maxent_grpo.objective.advantage_shaping import pass_at_k_group_weights, scale_positive
from maxent_grpo.objective.controllers import BetaController, TauController, annealed_tau
from maxent_grpo.objective.mode_keys import ModeKey, answer_keys, assign_mode_ids, mode_coverage, resolve_mode_key
from maxent_grpo.objective.mode_probability import mode_log_probs
from maxent_grpo.objective.weights import compute_listwise

logger = logging.getLogger(__name__)

#: A fixed tau above this, with the policy mode probabilities, draws a warning (see `from_config`).
POLICY_TAU_WARNING = 0.05


@dataclass(frozen=True)
class RolloutBatch:
    """What the listwise objective reads of one scored rollout batch.

    Gathered fields hold every process's rows in process order (``N`` rows); local fields hold this process's ``B``.
    """

    rewards_per_func: torch.Tensor  # [N, F] gathered; NaN where a reward function did not score the row
    reward_weights: torch.Tensor  # [F]
    row_keep: torch.Tensor | None  # [N] gathered bool; False on rows of dropped groups; None when none was dropped
    completion_mask: torch.Tensor  # [B, T] local; 1 on the completion tokens that train (tool output masked out)
    completion_ids: torch.Tensor  # [B, T] local
    texts: list[str]  # [B] local decoded completions (what reward functions and mode keys read)
    ref_per_token_logps: torch.Tensor | None  # [B, T] local reference log-probs; None when TRL computed none
    group_size: int  # G, rows per prompt group
    beta: float  # the KL coefficient this batch was scored with
    training: bool  # a training batch (controllers step) or an evaluation batch
    global_step: int  # optimizer steps done so far (the tau anneal's clock)
    max_steps: int  # optimizer steps of the run
    sampling_logps: Callable[[], torch.Tensor] | None = None  # -> [B] local summed log-probs of the sampling policy


@dataclass(frozen=True)
class ListwiseStep:
    """What one rollout batch gives: the advantages that train, the values to log and the next beta."""

    advantages: torch.Tensor  # [B] this process's advantages
    all_advantages: torch.Tensor  # [N] every process's advantages, in process order (the completions table)
    metrics: dict[str, float]  # `maxent/*` values to log for this batch
    beta: float  # the KL coefficient to train with from this batch on


def _gathered_groups(collectives: Collectives, local: list[Any], group_size: int) -> list[list[Any]]:
    """Every process's ``local`` values, gathered in process order and cut into prompt groups of ``group_size``."""
    flat = collectives.gather_object(local)
    return [flat[i : i + group_size] for i in range(0, len(flat), group_size)]


class ListwiseObjective:
    """Listwise advantages plus the tau and beta controllers of one training run."""

    def __init__(
        self,
        tau: TauController,
        beta: BetaController,
        *,
        q_temperature: float,
        q_epsilon: float,
        length_normalize_ref: bool,
        mode_key: ModeKey | None,
        coverage_threshold: float,
        tokenizer: PreTrainedTokenizerBase | None = None,
        tau_final: float | None = None,
        anneal_fraction: float = 1.0,
        mode_probability: str = "count",
        correction_clip: float = math.inf,
        pass_at_k: int = 1,
        positive_scale: float = 1.0,
    ) -> None:
        self.tau = tau
        self.beta = beta
        self.q_temperature = q_temperature
        self.q_epsilon = q_epsilon
        self.length_normalize_ref = length_normalize_ref
        self.mode_key = mode_key
        self.tokenizer = tokenizer
        self.coverage_threshold = coverage_threshold
        self.tau_final = tau_final
        self.anneal_fraction = anneal_fraction
        self.mode_probability = mode_probability
        self.correction_clip = correction_clip
        self.pass_at_k = pass_at_k
        self.positive_scale = positive_scale
        self._kl_values: list[float] = []
        if mode_key is not None and tokenizer is None:
            raise ValueError("a mode key needs the tokenizer that encodes the answers (tokenizer=None was given)")

    @classmethod
    def from_config(cls, args: MaxEntGRPOConfig, tokenizer: PreTrainedTokenizerBase) -> ListwiseObjective:
        """The objective ``args`` describe; ``tokenizer`` encodes answers for the mode keys that read token ids."""
        fixed_tau = args.maxent_tau_final is None and args.maxent_target_weight_entropy is None
        if args.maxent_mode_probability == "policy" and fixed_tau and args.maxent_tau > POLICY_TAU_WARNING:
            logger.warning(
                "maxent_mode_probability='policy' with a fixed maxent_tau=%s: the correction also pulls rare wrong "
                "answers up while tau gives them weight; anneal tau to near 0 with maxent_tau_final.",
                args.maxent_tau,
            )
        tau = TauController(
            args.maxent_tau,
            args.maxent_target_weight_entropy,
            args.maxent_tau_lr,
            args.maxent_tau_min,
            args.maxent_tau_max,
            args.maxent_tau_warmup_steps,
        )
        beta = BetaController(args.beta, args.kl_target, args.kl_horizon, args.kl_ctl_step_size)
        return cls(
            tau,
            beta,
            q_temperature=args.maxent_q_temperature,
            q_epsilon=args.maxent_q_epsilon,
            length_normalize_ref=args.maxent_length_normalize_ref,
            mode_key=resolve_mode_key(args.maxent_mode_key),
            coverage_threshold=args.maxent_mode_coverage_threshold,
            tau_final=args.maxent_tau_final,
            anneal_fraction=args.maxent_tau_anneal_fraction,
            mode_probability=args.maxent_mode_probability,
            correction_clip=args.maxent_mode_correction_clip or float(args.num_generations),
            pass_at_k=args.maxent_pass_at_k,
            positive_scale=args.maxent_positive_scale,
            tokenizer=tokenizer,
        )

    def step(self, batch: RolloutBatch, collectives: Collectives) -> ListwiseStep:
        """The listwise advantages of ``batch``; a training batch also steps the tau and beta controllers.

        Collective: every process calls it with its own rows, at the same point of the rollout.
        """
        group_size = batch.group_size
        rewards_per_func = batch.rewards_per_func
        unscorable = torch.isnan(rewards_per_func).all(dim=1)
        weights = batch.reward_weights.to(rewards_per_func.device)
        rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
        rewards[unscorable] = torch.nan
        valid = ~unscorable
        if batch.row_keep is not None:
            valid &= batch.row_keep.to(valid.device)
        # A row without a single unmasked token (a truncated completion under `mask_truncated_completions`) trains
        # nothing, so it is no candidate either, whatever beta: its reference term would be 0, the best value.
        mask = batch.completion_mask
        valid &= collectives.gather(mask.sum(dim=1) > 0).to(valid.device)

        ref_term = None
        if batch.beta > 0 and batch.ref_per_token_logps is not None:
            ref_sum = (batch.ref_per_token_logps * mask).sum(dim=1)
            local_ref = ref_sum / mask.sum(dim=1).clamp(min=1) if self.length_normalize_ref else ref_sum
            ref_term = collectives.gather(local_ref.float()).view(-1, group_size)

        keys = None
        mode_ids = None
        log_mode_prob = None
        if self.mode_key is not None:
            keys = _gathered_groups(collectives, answer_keys(self.mode_key, batch.texts, self.tokenizer), group_size)
            mode_ids = assign_mode_ids(keys).to(rewards.device)
            if self.mode_probability == "policy" and batch.training:
                log_mode_prob = self._mode_log_probs(batch, collectives, mode_ids, valid)

        tau = self.current_tau(batch.global_step, batch.max_steps)
        result = compute_listwise(
            rewards.view(-1, group_size),
            tau=tau,
            q_temperature=self.q_temperature,
            q_epsilon=self.q_epsilon,
            beta=batch.beta if ref_term is not None else 0.0,
            ref_term=ref_term,
            mode_ids=mode_ids,
            mode_log_prob=log_mode_prob,
            correction_clip=self.correction_clip,
            valid=valid.view(-1, group_size),
        )
        shaped = result.advantages
        if self.pass_at_k > 1:
            group_weights = pass_at_k_group_weights(rewards.view(-1, group_size), result.valid, self.pass_at_k)
            shaped = shaped * group_weights.to(shaped.device).unsqueeze(-1)
        shaped = scale_positive(shaped, self.positive_scale)
        advantages = shaped.reshape(-1).to(rewards.device)
        groups_with_data = valid.view(-1, group_size).any(dim=1)
        metrics = {"maxent/tau": tau, "maxent/beta": float(batch.beta)}
        if bool(groups_with_data.any()):
            entropy = result.entropy[groups_with_data].mean().item()
            metrics["maxent/weight_entropy"] = entropy
            if keys is not None:
                kept_keys = [group for group, ok in zip(keys, groups_with_data.tolist(), strict=True) if ok]
                kept_rewards = torch.nan_to_num(rewards.view(-1, group_size)[groups_with_data], nan=-math.inf)
                metrics["maxent/mode_coverage"] = mode_coverage(kept_keys, kept_rewards, self.coverage_threshold)
            if batch.training:
                self.tau.update(entropy)
        beta = self._step_beta(batch.beta) if batch.training else batch.beta
        num_local = len(batch.texts)
        start = collectives.process_index * num_local
        return ListwiseStep(advantages[start : start + num_local], advantages, metrics, beta)

    @staticmethod
    def _mode_log_probs(
        batch: RolloutBatch, collectives: Collectives, mode_ids: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        """``maxent_mode_probability="policy"`` (training batches only): each candidate's mode probability under the
        sampling policy, from the gathered batch (a group's distinct completions may sit on several processes)."""
        if batch.sampling_logps is None:
            raise ValueError("maxent_mode_probability='policy' needs the batch's sampling log-probs (sampling_logps)")
        group_size = batch.group_size
        logps = collectives.gather(batch.sampling_logps().float()).view(-1, group_size)
        # A completion's identity is the hash of its token ids (ints hash the same in every process): gathering the
        # ids themselves would copy every completion to every process.
        lengths = batch.completion_mask.sum(dim=1).tolist()
        rows = batch.completion_ids.tolist()
        local_ids = [hash(tuple(row[: int(length)])) for row, length in zip(rows, lengths, strict=True)]
        completions = _gathered_groups(collectives, local_ids, group_size)
        return mode_log_probs(mode_ids, completions, logps.to(mode_ids.device), valid.view(-1, group_size))

    def current_tau(self, global_step: int, max_steps: int) -> float:
        """The controller's tau, or with ``tau_final`` the anneal from it to ``tau_final``, which takes the first
        ``anneal_fraction`` of the run's ``max_steps`` (``tau_final`` from then on)."""
        if self.tau_final is None:
            return self.tau.tau
        anneal_steps = max(self.anneal_fraction * max_steps, 1)
        return annealed_tau(self.tau.tau, self.tau_final, global_step / anneal_steps)

    def observe_kl(self, value: float) -> None:
        """Record one KL value measured by TRL's loss (per micro-batch) for the next beta update.

        Only the beta controller reads these values, so none is kept while beta is fixed (no ``kl_target``).
        """
        if self.beta.kl_target is not None and math.isfinite(value):
            self._kl_values.append(value)

    def _step_beta(self, beta: float) -> float:
        """Feed the mean KL measured since the last rollout batch to the beta controller; the beta to train with."""
        if not self._kl_values:
            return beta
        beta = self.beta.update(sum(self._kl_values) / len(self._kl_values), n_steps=1)
        self._kl_values.clear()
        return beta

    def state_dict(self, trainer_beta: float) -> dict[str, Any]:
        """JSON-serialisable state: both controllers and the beta the trainer trains with."""
        return {"tau": self.tau.state_dict(), "beta": self.beta.state_dict(), "trainer_beta": trainer_beta}

    def load_state_dict(self, state: dict[str, Any]) -> float:
        """Restore what `state_dict` wrote; returns the beta the trainer trains with."""
        self.tau.load_state_dict(state["tau"])
        self.beta.load_state_dict(state["beta"])
        return float(state["trainer_beta"])
