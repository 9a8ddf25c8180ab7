"""Wire the MaxEnt listwise objective (`objective.py`) into a GRPO generation batch.

The listwise advantages are computed once per rollout batch, on the gathered batch of every process (groups may
straddle processes), from the same rewards TRL just computed, and frozen for the update exactly like TRL's
advantages. Dropped rows, unscorable rows and rows with no unmasked completion token are invalid candidates (weight 0,
advantage 0).
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

import torch
from accelerate.utils import gather_object

from maxent_grpo.config import MaxEntGRPOConfig
from maxent_grpo.objective.controllers import BetaController, TauController, annealed_tau
from maxent_grpo.objective.mode_keys import ModeKey, answer_keys, assign_mode_ids, mode_coverage, resolve_mode_key
from maxent_grpo.objective.mode_probability import mode_log_probs
from maxent_grpo.objective.sequence_logps import sequence_logps
from maxent_grpo.objective.weights import compute_listwise

if TYPE_CHECKING:
    from maxent_grpo.trainer import MaxEntGRPOTrainer

logger = logging.getLogger(__name__)

#: A fixed tau above this, with the policy mode probabilities, draws a warning (see `from_config`).
POLICY_TAU_WARNING = 0.05


def _gathered_groups(local: list[Any], group_size: int) -> list[list[Any]]:
    """Every process's ``local`` values, gathered in process order and cut into prompt groups of ``group_size``."""
    flat = gather_object(local)
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
        tau_final: float | None = None,
        anneal_fraction: float = 1.0,
        mode_probability: str = "count",
    ) -> None:
        self.tau = tau
        self.beta = beta
        self.q_temperature = q_temperature
        self.q_epsilon = q_epsilon
        self.length_normalize_ref = length_normalize_ref
        self.mode_key = mode_key
        self.coverage_threshold = coverage_threshold
        self.tau_final = tau_final
        self.anneal_fraction = anneal_fraction
        self.mode_probability = mode_probability
        self._kl_values: list[float] = []

    @classmethod
    def from_config(cls, args: MaxEntGRPOConfig) -> ListwiseObjective:
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
        )

    def advantages(self, trainer: MaxEntGRPOTrainer, output: dict[str, Any], mode: str) -> torch.Tensor:
        """Return this process's listwise advantages [B] for the batch TRL just scored, and log/steer."""
        accelerator = trainer.accelerator
        group_size = trainer.num_generations if mode == "train" else trainer.num_generations_eval
        rewards_per_func = trainer._last_rewards_per_func
        weights = trainer.reward_weights.to(rewards_per_func.device)
        unscorable = torch.isnan(rewards_per_func).all(dim=1)
        rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
        rewards[unscorable] = torch.nan
        valid = ~unscorable
        if trainer._global_row_keep is not None:
            valid &= trainer._global_row_keep.to(valid.device)
        # A row without a single unmasked token (a truncated completion under `mask_truncated_completions`) trains
        # nothing, so it is no candidate either, whatever beta: its reference term would be 0, the best value.
        mask = output["completion_mask"] * output.get("tool_mask", 1)
        valid &= accelerator.gather(mask.sum(dim=1) > 0).to(valid.device)

        beta = trainer.beta
        ref_term = None
        if beta > 0 and output.get("ref_per_token_logps") is not None:
            ref_sum = (output["ref_per_token_logps"] * mask).sum(dim=1)
            local_ref = ref_sum / mask.sum(dim=1).clamp(min=1) if self.length_normalize_ref else ref_sum
            ref_term = accelerator.gather(local_ref.float()).view(-1, group_size)

        keys = None
        mode_ids = None
        log_mode_prob = None
        if self.mode_key is not None:
            tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
            local_keys = answer_keys(self.mode_key, trainer._last_completion_texts, tokenizer)
            keys = _gathered_groups(local_keys, group_size)
            mode_ids = assign_mode_ids(keys).to(rewards.device)
            if self.mode_probability == "policy" and mode == "train":
                log_mode_prob = self._mode_log_probs(trainer, output, mode_ids, valid, group_size)

        tau = self.current_tau(trainer)
        result = compute_listwise(
            rewards.view(-1, group_size),
            tau=tau,
            q_temperature=self.q_temperature,
            q_epsilon=self.q_epsilon,
            beta=beta if ref_term is not None else 0.0,
            ref_term=ref_term,
            mode_ids=mode_ids,
            mode_log_prob=log_mode_prob,
            valid=valid.view(-1, group_size),
        )
        advantages = result.advantages.reshape(-1).to(rewards.device)
        groups_with_data = valid.view(-1, group_size).any(dim=1)
        metrics = trainer._metrics[mode]
        metrics["maxent/tau"].append(tau)
        metrics["maxent/beta"].append(float(beta))
        if bool(groups_with_data.any()):
            entropy = result.entropy[groups_with_data].mean().item()
            metrics["maxent/weight_entropy"].append(entropy)
            if keys is not None:
                kept_keys = [group for group, ok in zip(keys, groups_with_data.tolist(), strict=True) if ok]
                kept_rewards = torch.nan_to_num(rewards.view(-1, group_size)[groups_with_data], nan=-math.inf)
                metrics["maxent/mode_coverage"].append(mode_coverage(kept_keys, kept_rewards, self.coverage_threshold))
            if mode == "train":
                self.tau.update(entropy)
        if mode == "train":
            self._step_beta(trainer)

        # The completions table shows the advantages that train: replace the GRPO ones TRL just logged.
        logged = trainer._logs["advantages"]
        for _ in range(min(len(advantages), len(logged))):
            logged.pop()
        logged.extend(advantages.tolist())
        num_local = len(trainer._last_completion_texts)
        start = accelerator.process_index * num_local
        return advantages[start : start + num_local]

    @staticmethod
    def _mode_log_probs(
        trainer: MaxEntGRPOTrainer,
        output: dict[str, Any],
        mode_ids: torch.Tensor,
        valid: torch.Tensor,
        group_size: int,
    ) -> torch.Tensor:
        """``maxent_mode_probability="policy"`` (training batches only): each candidate's mode probability under the
        sampling policy, from the gathered batch (a group's distinct completions may sit on several processes)."""
        accelerator = trainer.accelerator
        local_logps = sequence_logps(trainer, output)
        logps = accelerator.gather(local_logps.float()).view(-1, group_size)
        # A completion's identity is the hash of its token ids (ints hash the same in every process): gathering the
        # ids themselves would copy every completion to every process.
        lengths = output["completion_mask"].sum(dim=1).tolist()
        rows = output["completion_ids"].tolist()
        local_ids = [hash(tuple(row[: int(length)])) for row, length in zip(rows, lengths, strict=True)]
        completions = _gathered_groups(local_ids, group_size)
        return mode_log_probs(mode_ids, completions, logps.to(mode_ids.device), valid.view(-1, group_size))

    def current_tau(self, trainer: MaxEntGRPOTrainer) -> float:
        """The controller's tau, or with ``tau_final`` the anneal from it to ``tau_final``, which takes the first
        ``anneal_fraction`` of the run's steps (``tau_final`` from then on)."""
        if self.tau_final is None:
            return self.tau.tau
        anneal_steps = max(self.anneal_fraction * trainer.state.max_steps, 1)
        return annealed_tau(self.tau.tau, self.tau_final, trainer.state.global_step / anneal_steps)

    def observe_kl(self, value: float) -> None:
        """Record one KL value measured by TRL's loss (per micro-batch) for the next beta update.

        Only the beta controller reads these values, so none is kept while beta is fixed (no ``kl_target``).
        """
        if self.beta.kl_target is not None and math.isfinite(value):
            self._kl_values.append(value)

    def _step_beta(self, trainer: MaxEntGRPOTrainer) -> None:
        """Feed the mean KL measured since the last rollout batch to the beta controller."""
        if not self._kl_values:
            return
        trainer.beta = self.beta.update(sum(self._kl_values) / len(self._kl_values), n_steps=1)
        self._kl_values.clear()

    def state_dict(self, trainer: MaxEntGRPOTrainer) -> dict[str, Any]:
        return {"tau": self.tau.state_dict(), "beta": self.beta.state_dict(), "trainer_beta": trainer.beta}

    def load_state_dict(self, trainer: MaxEntGRPOTrainer, state: dict[str, Any]) -> None:
        self.tau.load_state_dict(state["tau"])
        self.beta.load_state_dict(state["beta"])
        trainer.beta = float(state["trainer_beta"])
