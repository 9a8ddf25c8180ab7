"""Dynamic sampling (DAPO, Yu et al. 2025): refill prompt groups that carry no learning signal.

A group whose rewards are all equal has zero advantage under GRPO, and a dropped group has none at all, so training
on them wastes the batch. After a generation step is scored, each such group is replaced by the group of a fresh
prompt drawn from the training data, generated through the same backend and the same retry / drop path (so
invariants I1-I5 hold for replacements too), until every group has signal or the round cap is reached.

TRL's synchronous `GRPOTrainer` has no dynamic sampling (trl#3708); verl calls it `algorithm.filter_groups`.

Every process takes the same decisions: flat groups are found on the gathered rewards and replacement prompts are
drawn from a generator seeded by (seed, generation batch, round), where the generation batch counts the sampler's
refills (one per generation batch on every process, so several generation batches inside one optimizer step draw
different prompts) and is saved with checkpoints. A replaced row's prompt and dataset columns travel together: the
row's entry in TRL's `inputs` list is replaced in place, so reward functions see the new prompt's columns. A
replacement row has exactly the columns of the data loader's rows: with ``remove_unused_columns`` the Trainer keeps
only its signature columns, and so does the sampler.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from maxent_grpo.enum_fields import did_you_mean

logger = logging.getLogger(__name__)

#: Equality tolerance for "all rewards of a group are equal".
FLAT_TOLERANCE = 1e-9


class UnknownRewardMetricError(ValueError):
    """``dynamic_sampling_metric`` names no reward function of the trainer (input, not a bug: one line suffices)."""


def metric_column(metric: str, reward_func_names: Sequence[str]) -> int | None:
    """The reward column that ``dynamic_sampling_metric`` names: None for ``'sum'``, else the index of the reward
    function of that name (TRL's ``reward_func_names``: a function's ``__name__``, a reward model's name).

    Raises:
        UnknownRewardMetricError: ``metric`` is neither ``'sum'`` nor one of ``reward_func_names``; the message lists
            them, with the closest one.
    """
    if metric == "sum":
        return None
    if metric not in reward_func_names:
        names = list(reward_func_names)
        raise UnknownRewardMetricError(
            f"dynamic_sampling_metric={metric!r} is invalid: expected 'sum' or the name of a reward function, one of "
            f"{names}{did_you_mean(metric, names) or '.'}"
        )
    return list(reward_func_names).index(metric)


def groups_without_signal(metric: torch.Tensor, group_kept: torch.Tensor) -> torch.Tensor:
    """Bool [num_groups]: groups that were dropped, or whose finite rewards are all equal.

    Args:
        metric: [num_groups, G] reward used to judge signal; NaN marks unscorable rows.
        group_kept: [num_groups] whether the group survived generation.
    """
    finite = torch.isfinite(metric)
    high = torch.where(finite, metric, torch.full_like(metric, -torch.inf)).max(dim=1).values
    low = torch.where(finite, metric, torch.full_like(metric, torch.inf)).min(dim=1).values
    spread = torch.where(finite.sum(dim=1) >= 2, high - low, torch.zeros_like(high))
    return ~group_kept | (spread <= FLAT_TOLERANCE)


def draw_replacements(dataset_size: int, count: int, seed: int) -> list[int]:
    """``count`` dataset indices drawn uniformly with replacement, identical on every process for the same seed."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(dataset_size, (count,), generator=generator).tolist()


@dataclass
class RefillOutcome:
    """What a refill did in one step: groups without signal at first, extra rounds run, groups generated in total."""

    filtered_groups: int
    rounds: int
    generated_groups: int
    groups_with_signal: int

    def metrics(self) -> dict[str, float]:
        """The `dynamic_sampling/*` values to log for this step."""
        return {
            "dynamic_sampling/filtered_groups": float(self.filtered_groups),
            "dynamic_sampling/rounds": float(self.rounds),
            "dynamic_sampling/generated_groups": self.generated_groups / max(self.groups_with_signal, 1),
        }


def merge_extra_logs(
    earlier: dict[str, list[Any]], fresh: dict[str, list[Any]], rows_to_score: Sequence[bool]
) -> dict[str, list[Any]]:
    """The extra columns reward functions logged (``log_extra``), per row from the round that scored it: ``fresh``
    for the rows scored this round, ``earlier`` for the others (None where neither has a value)."""
    num_rows = len(rows_to_score)
    merged = {}
    for column in set(earlier) | set(fresh):
        new_values = fresh.get(column) or [None] * num_rows
        old_values = earlier.get(column) or [None] * num_rows
        merged[column] = [
            new if scored else old for new, old, scored in zip(new_values, old_values, rows_to_score, strict=True)
        ]
    return merged


class DynamicSampler:
    """Runs the refill loop for one trainer; see the module docstring.

    Args:
        dataset: map-style training data set (rows are dicts with a ``prompt`` column).
        reward_weights: [F] weights of the reward functions (TRL's ``reward_weights``).
        metric_column: index of the reward function that judges signal, or None for the weighted sum.
        max_rounds: cap on extra generation rounds per step.
        error_at_cap: raise instead of training on what was collected when the cap is hit with groups left flat.
        seed: base seed of the replacement draws.
        columns: the columns the data loader keeps (the Trainer's signature columns with ``remove_unused_columns``),
            or None for every column of the data set.
    """

    #: Key of the sampler's state in the trainer's checkpoint file.
    checkpoint_key: ClassVar[str] = "dynamic_sampler"

    def __init__(
        self,
        dataset: Any,
        reward_weights: torch.Tensor,
        *,
        metric_column: int | None,
        max_rounds: int,
        error_at_cap: bool,
        seed: int,
        columns: Collection[str] | None = None,
    ) -> None:
        if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise ValueError("dynamic_sampling needs a map-style training data set (it draws replacement prompts).")
        if len(dataset) == 0:
            raise ValueError("dynamic_sampling needs a non-empty training data set.")
        if any(column in getattr(dataset, "column_names", ()) for column in ("image", "images")):
            raise ValueError("dynamic_sampling does not support image data sets.")
        self.dataset = dataset
        self.reward_weights = reward_weights
        self.metric_column = metric_column
        self.max_rounds = max_rounds
        self.error_at_cap = error_at_cap
        self.seed = seed
        self.columns = None if columns is None else frozenset(columns)
        self.generation_batches = 0

    @classmethod
    def of(cls, trainer: Any) -> DynamicSampler:
        """The sampler a `GRPOTrainer` with ``dynamic_sampling`` uses: its data set, reward weights and config."""
        args = trainer.args
        column = metric_column(args.dynamic_sampling_metric, trainer.reward_func_names)
        if args.remove_unused_columns:  # the data loader keeps the signature columns only (`_get_dataloader`)
            trainer._set_signature_columns_if_needed()
        return cls(
            trainer.train_dataset,
            trainer.reward_weights,
            metric_column=column,
            max_rounds=args.dynamic_sampling_max_rounds,
            error_at_cap=args.dynamic_sampling_at_cap == "error",
            seed=args.seed,
            columns=trainer._signature_columns if args.remove_unused_columns else None,
        )

    def row(self, index: int) -> dict[str, Any]:
        """The data set's row ``index`` as the data loader hands it out (its columns filtered alike)."""
        row = self.dataset[index]
        return {key: value for key, value in row.items() if self.columns is None or key in self.columns}

    def metric(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        """[N] reward judging signal: one function's column, or the weighted sum (NaN when every function is NaN)."""
        if self.metric_column is not None:
            return rewards_per_func[:, self.metric_column]
        summed = (rewards_per_func * self.reward_weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
        summed[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        return summed

    def refill(
        self,
        *,
        group_size: int,
        row_offset: int,
        inputs: list[dict[str, Any]],
        prompts: list[Any],
        score: Callable[[Sequence[bool]], tuple[torch.Tensor, torch.Tensor]],
        regenerate: Callable[[list[int]], torch.Tensor],
        out_of_time: Callable[[], bool] | None = None,
    ) -> RefillOutcome:
        """Replace groups without signal until none is left or the cap is hit.

        Every call is one generation batch: the draws of each call differ from those of every other call.

        Args:
            group_size: G.
            row_offset: global index of this process's first row.
            inputs / prompts: this process's dataset rows and prompts, [B]; replaced in place.
            score: scores the local rows marked True (others keep their previous rewards) and returns
                (rewards_per_func [N, F], group_kept [num_groups]) for the whole batch.
            regenerate: re-collects the given local rows (whole runs) and returns the new group_kept.
            out_of_time: asked before each round (a collective, the same answer on every process): True once the
                generation step's time budget is spent, and no further round starts. None: no budget.
        """
        batch = self.generation_batches
        self.generation_batches += 1
        rewards, group_kept = score([True] * len(prompts))
        num_groups = group_kept.numel()
        flat = groups_without_signal(self.metric(rewards).view(-1, group_size), group_kept)
        outcome = RefillOutcome(int(flat.sum()), 0, num_groups, 0)
        while bool(flat.any()) and outcome.rounds < self.max_rounds:
            if out_of_time is not None and out_of_time():
                logger.info(
                    "dynamic sampling: the generation step's time budget is spent after %d extra round(s); %d groups "
                    "without learning signal are trained on as they are.",
                    outcome.rounds,
                    int(flat.sum()),
                )
                break
            outcome.rounds += 1
            flat_groups = flat.nonzero().flatten().tolist()
            draws = draw_replacements(
                len(self.dataset), len(flat_groups), self.seed + 1_000_003 * batch + outcome.rounds
            )
            replaced_rows = []
            for group, dataset_index in zip(flat_groups, draws, strict=True):
                row = self.row(dataset_index)
                for global_row in range(group * group_size, (group + 1) * group_size):
                    local_row = global_row - row_offset
                    if 0 <= local_row < len(prompts):
                        inputs[local_row] = dict(row)
                        prompts[local_row] = row["prompt"]
                        replaced_rows.append(local_row)
            outcome.generated_groups += len(flat_groups)
            regenerate(replaced_rows)
            replaced = set(replaced_rows)
            rewards, group_kept = score([i in replaced for i in range(len(prompts))])
            flat = groups_without_signal(self.metric(rewards).view(-1, group_size), group_kept)
        outcome.groups_with_signal = num_groups - int(flat.sum())
        if bool(flat.any()):
            message = (
                f"dynamic sampling: {int(flat.sum())} of {num_groups} groups still have no learning signal after "
                f"dynamic_sampling_max_rounds={self.max_rounds} extra rounds"
            )
            if self.error_at_cap:
                raise RuntimeError(message + " (dynamic_sampling_at_cap='error').")
            logger.info("%s; training on what was collected.", message)
        return outcome

    def state_dict(self) -> dict[str, int]:
        """JSON-serialisable state: the number of generation batches refilled so far."""
        return {"generation_batches": self.generation_batches}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Restore the state saved by [`state_dict`]."""
        batches = state["generation_batches"]
        if isinstance(batches, bool) or not isinstance(batches, int) or batches < 0:
            raise ValueError(f"state['generation_batches'] must be an integer >= 0, got {batches!r}.")
        self.generation_batches = batches
