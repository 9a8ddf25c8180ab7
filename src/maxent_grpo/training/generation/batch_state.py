"""`GenerationBatchState`: what the generation step decided for the batch TRL is scoring now.

TRL's hooks for one batch run in a fixed order (`_generate_and_score_completions` calls `_generate`, then
`_calculate_rewards`, then computes advantages and logs); the trainer hands what one hook decided to the later ones
through a single attribute, ``MaxEntGRPOTrainer._batch``, holding one of these (None before the first batch).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class GenerationBatchState:
    """One batch's rows as the generation step left them; replaced, never changed, as the batch advances.

    When it is replaced:

    - `_generate_and_score_completions` starts each batch with ``GenerationBatchState(inputs)`` (no keep mask yet);
    - dynamic sampling's scoring rounds (inside `_generate`) replace it with the round's ``keep`` (the rows that round
      scores), so the reward functions see those rows only;
    - `_generate` replaces it with what the step decided (both keep masks, texts and, with dynamic sampling, the
      final rows' rewards);
    - `_calculate_rewards` replaces it with the rewards it scored, and both keep masks less the rows its reward
      functions could not score (`scored`, `training.reward_scoring`).

    Attributes:
        inputs: the batch's dataset rows [B], as `_generate_and_score_completions` received them. Read by `_generate`
            (episodes' reset arguments; dynamic sampling replaces rows, prompt and columns together, in this list in
            place, so TRL scores the replacements).
        keep: whether each of this process's rows is kept [B], None when not decided yet (every row then counts as
            kept). Read by the reward functions' wrappers (`reward_masking`) and by `_generate_and_score_completions`
            (the keep column TRL's loss reads, `kept_rows.ROW_KEEP_KEY`).
        global_keep: ``keep`` of every process, in process order [N], None when not decided yet. Read by
            `_calculate_rewards` (dropped rows score NaN), by `_generate_and_score_completions` (TRL's metrics and
            completions table over kept rows) and by the listwise objective.
        texts: this process's completion texts [B] (an episode's final answer). Read by the listwise objective (mode
            keys).
        rewards_per_func: rewards of every process's rows, one column per reward function [N, F]; None until
            dynamic sampling's final scoring or `_calculate_rewards` has scored them. Read by `_calculate_rewards`
            (already scored: returned as they are), by TRL's metric restriction (`frac_reward_zero_std`) and by the
            listwise objective.
    """

    inputs: list[dict[str, Any]]
    keep: list[bool] | None = None
    global_keep: torch.Tensor | None = None
    texts: list[str] = dataclasses.field(default_factory=list)
    rewards_per_func: torch.Tensor | None = None

    @property
    def dropped_any(self) -> bool:
        """Whether the step dropped a row on some process (False while nothing is decided)."""
        return self.global_keep is not None and not bool(self.global_keep.all())

    def scored(
        self, rewards_per_func: torch.Tensor, global_keep: torch.Tensor, process_index: int
    ) -> GenerationBatchState:
        """This state with the batch's rewards [N, F] recorded and the rows of every process that stay kept [N]
        (this process's ``keep`` its slice of them: process ``process_index`` holds ``len(keep)`` rows)."""
        assert self.keep is not None
        start = process_index * len(self.keep)
        keep = global_keep[start : start + len(self.keep)].tolist()
        return dataclasses.replace(self, keep=keep, global_keep=global_keep, rewards_per_func=rewards_per_func)
