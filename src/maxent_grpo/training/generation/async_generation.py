"""Asynchronous generation: the next optimizer step's first generation batch is generated while this one trains.

With ``async_generation`` the trainer reads one optimizer window ahead: when the Trainer takes a window's inputs from
its epoch iterator, the next window's are taken too (`AsyncGeneration.window_inputs`). Once this window has no
generation left to run, and its weights are written as a version for the server, a background thread makes the next
window's *first call*: the same unique prompts and counts that window's generation step would ask the backend for
first (`call_ahead.first_call`). When that window generates, its first call is answered from what came back
(`call_ahead.ReplayedFirstCall`); everything after it (retry rounds, the agreement across processes, dynamic
sampling, the drop decisions, the metrics) runs as in synchronous generation, on the main thread, from the current
weights. So every
collective stays on the main thread, in the same order on every process (invariant I7), and retry / drop hold as
they are: a prefetched call that failed, in whole or in part, is retried for its deficit like any other.

The background thread only speaks HTTP to the server (the weight push included). The main thread waits for it
(`take`, `wait`) before it uses the backend again, so the two never use the backend at once, and the version the
server is asked to serve never changes under a call in flight. A backend whose sync comes in two parts
(`SupportsWeightStaging`, the disk transport) has the next version's files written while the call is still in
flight, and made the version to serve only once the call has ended: the write overlaps the server's generation.

Staleness (invariant I9): each completion carries the weight version it was sampled from
(`Completion.weight_version`), and the trainer reports at which optimizer step it wrote each version
(`weights_written`). A prefetched completion whose weights are more than ``max_staleness`` steps older than those it
is last trained from (a batch is trained over ``num_iterations`` steps), or of a version this run did not write, is
left out of its group, so it is asked for again from the current weights (``generation/too_stale_completions``).
Reading one window ahead, a prefetched completion is one step old at its first use (a retried one, generated at its
own window, none); TRL's importance-sampling correction
(``vllm_importance_sampling_correction``, required) reweighs each token by the current policy over the sampler.

Not carried across: the first window of each epoch is generated synchronously (the next epoch's iterator does not
exist yet), and a batch in flight when training ends, stops or is interrupted is abandoned (its requests cut off); a
checkpoint never holds it, so a resumed run generates those prompts again, from the restored weights.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from maxent_grpo.collectives import Collectives
from maxent_grpo.training.combination_checks import generation_span
from maxent_grpo.training.generation.call_ahead import Prefetch, ReplayedFirstCall, first_call
from maxent_grpo.training.generation.contract.capabilities import (
    SupportsCancel,
    SupportsDeadline,
    SupportsSamplerLogprobs,
    SupportsTokenPrompts,
)
from maxent_grpo.training.generation.contract.protocol import Completion, GenerationBackend
from maxent_grpo.training.generation.rows import GeneratedRows
from maxent_grpo.training.generation.step import weight_counts

logger = logging.getLogger(__name__)

# How long closing waits for a call in flight to end (it is abandoned after that; its thread is a daemon).
_CLOSE_WAIT_SECONDS = 30.0


class AsyncGeneration:
    """The trainer's generation one window ahead; see the module docstring.

    Args:
        backend: the trainer's backend (the vLLM server backend).
        generate_every: TRL's micro-steps between generations (``steps_per_generation * num_iterations``).
        window_size: micro-batches of a full optimizer window (``gradient_accumulation_steps``).
        max_staleness: optimizer steps a completion's weights may lag behind those it is last trained from.
        span: optimizer steps one generation's rows are trained over (``num_iterations`` windows, or the windows
            ``steps_per_generation`` micro-batches span); staleness is counted at the last of them.
        group_size: G, completions per prompt.
        process_index: this process's index.
        step_timeout: ``generation_step_timeout``: bounds the call made ahead too, from its start.
    """

    def __init__(
        self,
        backend: GenerationBackend,
        *,
        generate_every: int,
        window_size: int,
        max_staleness: int,
        group_size: int,
        process_index: int,
        step_timeout: float | None,
        span: int = 1,
    ) -> None:
        self.backend = backend
        self.generate_every = generate_every
        self.window_size = window_size
        self.max_staleness = max_staleness
        self.span = span
        self.group_size = group_size
        self.process_index = process_index
        self.step_timeout = step_timeout
        self._iterator: Iterator[Any] | None = None
        self._ahead: list[Any] = []
        self._window = (0, 0)
        self._inflight: Prefetch | None = None
        self._version_steps: dict[str, int] = {}
        self._waited = 0.0
        self._replayed: ReplayedFirstCall | None = None
        self._abandoned: list[Prefetch] = []

    @classmethod
    def of(cls, trainer: Any) -> AsyncGeneration:
        """The one of a `MaxEntGRPOTrainer` whose TRL init and backend are built.

        Raises:
            ValueError: the backend does not ask for the sampler's log-probs (``generation_kwargs`` turned them off),
                which TRL's importance-sampling correction of the rows generated ahead needs.
        """
        args, backend = trainer.args, trainer.generation_backend
        if isinstance(backend, SupportsSamplerLogprobs) and not backend.wants_logprobs:
            raise ValueError(
                "async_generation=True needs the sampler's log-probs for TRL's importance-sampling correction of the "
                "rows generated ahead, and generation_kwargs turns them off."
            )
        return cls(
            backend,
            generate_every=args.steps_per_generation * trainer.num_iterations,
            window_size=args.gradient_accumulation_steps,
            max_staleness=args.max_staleness,
            group_size=trainer.num_generations,
            process_index=trainer.accelerator.process_index,
            step_timeout=args.generation_step_timeout,
            span=generation_span(args),
        )

    # ------------------------------------------------------------------------------------------ window inputs

    def window_inputs(self, epoch_iterator: Iterator[Any], num_batches: int, start: int) -> list[Any]:
        """The Trainer's ``num_batches`` inputs of the window starting at micro-step ``start`` (those read ahead
        first), and the next window's read ahead (fewer at the end of the epoch)."""
        if epoch_iterator is not self._iterator:  # a new epoch: nothing read ahead belongs to it
            self._iterator, self._ahead = epoch_iterator, []
            self._abandon()
        taken, self._ahead = self._ahead[:num_batches], self._ahead[num_batches:]
        taken += _take(epoch_iterator, num_batches - len(taken))
        self._ahead += _take(epoch_iterator, self.window_size - len(self._ahead))
        self._window = (start, len(taken))
        return taken

    def _generation_steps(self, start: int, size: int) -> list[int]:
        return [step for step in range(start, start + size) if step % self.generate_every == 0]

    # -------------------------------------------------------------------------------------------- prefetching

    def start_next(self, after_step: int | None, sync_weights: Callable[[], None], *, last_window: bool) -> None:
        """Start the next window's first call if this window has no generation left after ``after_step`` (None: the
        window is prepared), it is not the run's ``last_window``, and the next window's inputs are known.
        ``sync_weights`` writes the current weights first (a collective where the walk is one: every process calls
        this at the same point)."""
        upcoming = self._upcoming(last_window)
        start, size = self._window
        if after_step is not None and any(step > after_step for step in self._generation_steps(start, size)):
            return
        if not upcoming or (self._inflight is not None and self._inflight.step == upcoming[0]):
            return
        self._abandon()
        backend = self.backend
        counts_before = weight_counts(backend)  # a write here is counted in the step the call is for
        sync_weights()
        inputs = self._ahead[upcoming[0] - start - size]
        call = first_call([row["prompt"] for row in inputs], self.process_index, self.group_size)
        # One thread uses the tokenizer at a time: the prompts are tokenized here, where the backend can.
        sent = backend.token_prompts(call.prompts) if isinstance(backend, SupportsTokenPrompts) else list(call.prompts)
        prefetch = Prefetch(upcoming[0], call, sent, counts_before)
        prefetch.thread = threading.Thread(
            target=self._run, args=(prefetch,), name="maxent-grpo-async-generation", daemon=True
        )
        self._inflight = prefetch
        prefetch.thread.start()

    def calls_ahead_after_window(self, last_window: bool) -> bool:
        """Whether a call is made ahead for the window after this one: it generates, and this is not the run's
        ``last_window``."""
        return bool(self._upcoming(last_window))

    def _upcoming(self, last_window: bool) -> list[int]:
        """The generation steps of the next window (none after the run's ``last_window``)."""
        if last_window:
            return []
        start, size = self._window
        return self._generation_steps(start + size, len(self._ahead))

    def _run(self, prefetch: Prefetch) -> None:
        bounded = self.backend if isinstance(self.backend, SupportsDeadline) else None
        began = time.monotonic()
        if bounded is not None and self.step_timeout is not None:
            bounded.set_deadline(began + self.step_timeout)
        try:
            # Checked after the deadline is set: a `close` before this sees the call skipped, one after it cuts the
            # call off with its own deadline (never undone by the one above).
            if not prefetch.cancelled:
                prefetch.groups = self.backend.generate(list(prefetch.sent), list(prefetch.call.counts))
        except BaseException as error:  # replayed in the step, where the protocol decides what it means
            prefetch.error = error
        finally:
            if bounded is not None:  # also the deadline `close` set: the backend is usable again
                bounded.set_deadline(None)
            prefetch.seconds = time.monotonic() - began

    def _join(self, prefetch: Prefetch | None, timeout: float | None = None) -> None:
        if prefetch is not None and prefetch.thread is not None and prefetch.thread.is_alive():
            began = time.monotonic()
            prefetch.thread.join(timeout)
            self._waited += time.monotonic() - began

    def wait(self) -> None:
        """Wait for the call in flight, if any (its result is kept for the step it is for), and for any call `close`
        abandoned: only then is the backend free for the caller."""
        for abandoned in self._abandoned:
            self._join(abandoned)
        self._abandoned = []
        self._join(self._inflight)

    def take(self, step: int, prompts: Sequence[Any], trained_step: int, training: bool) -> ReplayedFirstCall | None:
        """Wait for the call in flight and, for a ``training`` generation at micro-step ``step`` of these ``prompts``
        (the one it was made for), return the backend that replays it to a step training the weights of optimizer
        step ``trained_step``. An evaluation only waits: the call stays for the step it is for."""
        self.wait()
        if not training:
            return None
        prefetch, self._inflight, self._replayed = self._inflight, None, None
        if prefetch is None:
            return None
        if prefetch.step != step or prefetch.call != first_call(prompts, self.process_index, self.group_size):
            logger.warning(
                "the batch generated ahead for micro-step %d is not the one micro-step %d asks for: generated again",
                prefetch.step,
                step,
            )
            return None

        def fresh(completion: Completion) -> bool:
            written = self._version_steps.get(completion.weight_version or "")
            return written is not None and trained_step + self.span - 1 - written <= self.max_staleness

        self._replayed = ReplayedFirstCall(self.backend, prefetch, fresh)
        return self._replayed

    def weights_written(self, version: str | None, step: int) -> None:
        """The trainer wrote the weights of optimizer step ``step`` as ``version``."""
        if version is not None:
            self._version_steps.setdefault(version, step)

    def close(self) -> None:
        """Stop the call in flight: its requests are cut off and none is tried again (a weight push cut off leaves the
        server generating from what it loaded, never claiming the version), and it is waited for, at most
        `_CLOSE_WAIT_SECONDS`; one still running then is abandoned (its thread is a daemon, and whoever uses the
        backend next waits for it first)."""
        prefetch, self._inflight, self._ahead, self._iterator = self._inflight, None, [], None
        if prefetch is None or prefetch.thread is None or not prefetch.thread.is_alive():
            return
        prefetch.cancelled = True
        if isinstance(self.backend, SupportsDeadline):
            self.backend.set_deadline(time.monotonic())
        if isinstance(self.backend, SupportsCancel):
            self.backend.cancel_requests()
        self._join(prefetch, _CLOSE_WAIT_SECONDS)
        if prefetch.thread.is_alive():
            self._abandoned.append(prefetch)
            logger.warning(
                "the generation request made ahead is still in flight after %.0f s: abandoned", _CLOSE_WAIT_SECONDS
            )

    def _abandon(self) -> None:
        if self._inflight is not None:
            self.wait()
            self._inflight = None

    # ------------------------------------------------------------------------------------------------ metrics

    def metrics(self, rows: GeneratedRows, trained_step: int, collectives: Collectives) -> dict[str, float]:
        """This generation's staleness over kept rows (optimizer steps between their weights and the trained ones),
        completions asked for again as too stale, and the seconds the call ahead took and was waited for, over all
        processes (a collective: every process calls it once per training generation)."""
        lags = [
            trained_step + self.span - 1 - self._version_steps[version]
            for version, kept in zip(rows.weight_versions, rows.keep, strict=True)
            if kept and version in self._version_steps
        ]
        replayed = self._replayed
        local = [
            float(sum(lags)),
            float(len(lags)),
            float(max(lags, default=0)),
            float(0 if replayed is None else replayed.too_stale),
            0.0 if replayed is None else replayed.seconds,
            self._waited,
        ]
        self._waited, self._replayed = 0.0, None
        table = collectives.gather(torch.tensor([local], dtype=torch.float64, device=collectives.device))
        total, count = float(table[:, 0].sum()), float(table[:, 1].sum())
        return {
            "generation/staleness_mean": total / count if count else 0.0,
            "generation/staleness_max": float(table[:, 2].max()),
            "generation/too_stale_completions": float(table[:, 3].sum()),
            "generation/ahead_seconds": float(table[:, 4].max()),
            "generation/ahead_wait_seconds": float(table[:, 5].max()),
        }


def _take(iterator: Iterator[Any], count: int) -> list[Any]:
    taken = []
    for _ in range(max(count, 0)):
        try:
            taken.append(next(iterator))
        except StopIteration:
            break
    return taken
