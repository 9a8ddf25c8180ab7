"""Generation batches without a single kept group (invariant I4): counted, warned about, and a run stopped on them.

A batch in which every group was dropped makes no parameter update. After
``generation_max_consecutive_empty_batches`` such training batches in a row the run stops with
`NoUsableGenerationError` instead of training on nothing; a run that ends with every batch dropped, or before a single
generation batch, raises it too (fewer empty batches than the limit do not stop a run, so a short run could otherwise
end normally, and save, without one update). A batch whose rows all left at scoring (no reward function could score
them, `training.reward_scoring`) made no update either and counts as kept nothing for that end-of-run check; the
streak of such batches is `reward_max_consecutive_failed_batches`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

logger = logging.getLogger(__name__)


class NoUsableGenerationError(RuntimeError):
    """Training stopped, or ended, without one usable prompt group: the model was not trained on anything."""


class EmptyBatchGuard:
    """Counts the generation batches of one `train` call and the training batches in a row that kept nothing."""

    def __init__(self, max_consecutive: int) -> None:
        self.max_consecutive = max_consecutive
        self.consecutive = 0
        self.generated = 0
        self.kept = 0
        self.unscored = 0

    def start_run(self) -> None:
        """Forget the batches of an earlier `train` call (the consecutive count goes on: it follows the data)."""
        self.generated = 0
        self.kept = 0
        self.unscored = 0

    def record_unscored(self) -> None:
        """The last training batch kept rows at generation but lost every one of them at scoring."""
        self.kept -= 1
        self.unscored += 1

    def record(self, *, training: bool, kept_any: bool, num_groups: int, reasons: Sequence[str]) -> None:
        """Count one generation batch; warn when it kept nothing; raise once too many training batches in a row did."""
        if training:
            self.generated += 1
            self.kept += int(kept_any)
        if kept_any:
            if training:
                self.consecutive = 0
            return
        causes = "; ".join(sorted(set(reasons))[:5]) or "every group came back short"
        if not training:
            logger.warning("All %d prompt groups of this evaluation batch were dropped (%s).", num_groups, causes)
            return
        self.consecutive += 1
        limit = self.max_consecutive
        if self.consecutive >= limit:
            raise NoUsableGenerationError(
                f"Generation produced no usable prompt group in {self.consecutive} consecutive batches "
                f"(generation_max_consecutive_empty_batches={limit}); stopping instead of training on nothing. "
                f"Last causes on this process: {causes}."
            )
        logger.warning(
            "All %d prompt groups of this generation batch were dropped (%s); this batch makes no parameter update "
            "(%d/%d consecutive empty batches allowed).",
            num_groups,
            causes,
            self.consecutive,
            limit,
        )

    def check_run_end(self, global_step: int, max_steps: int) -> None:
        """Raise `NoUsableGenerationError` when the `train` call that just ended never trained on anything."""
        if self.generated and not self.kept:
            what = "dropped (no prompt group came back complete after retries)"
            if self.unscored:
                what = (
                    f"dropped or left unscored ({self.unscored} of them: no reward function could score their rows "
                    "after retries)"
                )
            raise NoUsableGenerationError(
                f"every one of the {self.generated} generation batches of this run was {what}, so no parameter was "
                "updated; the warnings above name the causes"
            )
        if not self.generated and global_step < max_steps:
            raise NoUsableGenerationError(
                f"training stopped at step {global_step} of {max_steps} without a single generation batch: the "
                "training data yielded no full batch (fewer distinct prompts than one generation batch needs: "
                "generation_batch_size / num_generations)"
            )
