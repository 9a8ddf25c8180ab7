"""What a generation backend may offer besides ``generate``: one small `Protocol` per optional capability.

A backend needs only `GenerationBackend.generate`. Each protocol here is one more thing the trainer does when the
backend has it (checked with `isinstance`, by the member's name); a backend without it is simply not asked. When a
backend of your own is given to the trainer, `check_backend` makes sure each capability it defines has the shape the
trainer uses (a method it can call as the trainer does; a value, attribute or property, where the trainer reads one),
and warns about a public name that looks like a misspelt capability.
"""

from __future__ import annotations

import difflib
import inspect
import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from maxent_grpo.training.generation.contract.protocol import GenerationBackend, TokenPrompt

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)


@runtime_checkable
class SupportsWeightSync(Protocol):
    """A backend whose sampler holds its own copy of the weights (a vLLM engine or server).

    Before a generation step, when the optimizer has stepped since the last sync (and before the very first
    generation), the trainer calls ``sync_weights(model)`` on every process with the unwrapped training model, then
    waits for every process (a barrier); with ``async_generation`` also before the call it makes ahead. After it, the
    next ``generate`` must sample from ``model``'s current weights (invariant I8); raise where that cannot be done
    rather than sample from stale ones. With a ``rollout_func`` the trainer syncs the backend it would have built.
    """

    def sync_weights(self, model: torch.nn.Module) -> None: ...


@runtime_checkable
class SupportsWeightStaging(Protocol):
    """A `SupportsWeightSync` backend whose sync comes in two parts: writing the new weights, and making them the
    ones to sample from.

    With ``async_generation`` the trainer calls ``stage_weights(model)`` on every process as soon as a window's
    generation step starts, while the call made ahead for that window may still be generating from the weights before
    (so the write overlaps it), and ``publish_staged_weights()`` once that call has ended, in place of
    ``sync_weights(model)``; the model does not change in between. Until it is published, the staged version must
    not change what a call in flight samples from or claims to.
    """

    def stage_weights(self, model: torch.nn.Module) -> None: ...

    def publish_staged_weights(self) -> None: ...


@runtime_checkable
class SupportsWriteBehind(Protocol):
    """A `SupportsWeightStaging` backend whose ``stage_weights(model)`` may return while it still reads ``model``'s
    parameters: the new weights are written on a thread of their own, behind the training step.

    The trainer calls ``finish_staged_weights()`` on every process before each optimizer step and at the end of each
    epoch; once it returns, the backend reads the model no more until the next ``stage_weights``.
    It raises what the write raised (every process alike), and does nothing when nothing is being written.
    """

    def finish_staged_weights(self) -> None: ...


@runtime_checkable
class SupportsDeadline(Protocol):
    """A backend that can cut its work off at a given instant.

    With ``generation_step_timeout`` set, the trainer calls ``set_deadline(deadline)``, ``deadline`` the
    `time.monotonic` instant by which the step's backend calls should end, before the step's first call and retry
    rounds (and before each dynamic-sampling round), and ``set_deadline(None)`` after them. A ``generate`` still
    running at the deadline returns what it has by then (the missing slots are dropped). With ``async_generation`` it
    is also set around the call made ahead, and set to now when training ends with that call still in flight.
    """

    def set_deadline(self, deadline: float | None) -> None: ...


@runtime_checkable
class SupportsStats(Protocol):
    """A backend that counts what happened to its requests.

    The trainer reads ``stats`` before every generation step writes the weights and after the step (and when it
    starts a call ahead). When it is a dict holding all of ``weight_pushes``, ``weight_resyncs`` and
    ``stale_completions``, how much each grew during the step is logged, summed over processes, as
    ``generation/<key>``, and so is each key under ``servers/`` (a server pool's per-server counters, the same keys on
    every process) and, where the dict has them, ``weight_write_seconds`` and ``weight_reload_seconds`` (sums of
    seconds, logged as their maximum over processes); other keys are the backend's own report, not logged.
    """

    @property
    def stats(self) -> dict[str, float] | None: ...


@runtime_checkable
class SupportsFailureReasons(Protocol):
    """A backend that can say why slots came back missing.

    The trainer reads ``reasons`` once per generation step, after collecting: when no group of the batch was kept, up
    to five distinct entries (with the step's own) say why in the warning, and in the `NoUsableGenerationError` raised
    after ``generation_max_consecutive_empty_batches`` such batches. The trainer never clears it.
    """

    @property
    def reasons(self) -> Sequence[str]: ...


@runtime_checkable
class SupportsCancel(Protocol):
    """A backend whose requests in flight can be cut off from another thread.

    With ``async_generation``, when training ends while the call made ahead is still running, the trainer sets the
    backend's deadline to now (`SupportsDeadline`) and calls ``cancel_requests()`` on the main thread, then waits at
    most 30 s for that call to return. Every request in flight should end promptly, as a failure, and none be tried
    again.
    """

    def cancel_requests(self) -> None: ...


@runtime_checkable
class SupportsTokenPrompts(Protocol):
    """A backend that can tokenize prompts the way it would send them.

    With ``async_generation`` the trainer calls ``token_prompts(prompts)`` on the main thread with the unique prompts
    of the call it makes ahead, and that call's ``generate`` (on a background thread) gets what it returned, one
    `TokenPrompt` per prompt, in order: the tokenizer is only ever used by one thread. ``generate`` must accept them
    and sample from those ids as they are.
    """

    def token_prompts(self, prompts: Sequence[Any]) -> list[TokenPrompt]: ...


@runtime_checkable
class SupportsContextLength(Protocol):
    """A backend whose engine has a context length of its own.

    With ``tools`` or ``environment_factory`` the trainer reads ``max_model_len`` once, when it is built: an episode's
    next turn (the conversation so far plus the tool results) must stay below it, else the episode ends without those
    results, as in TRL. None means the model's ``max_position_embeddings``, which is also what a backend without it
    gets.
    """

    @property
    def max_model_len(self) -> int | None: ...


@runtime_checkable
class SupportsSamplerLogprobs(Protocol):
    """A backend that may be set not to return the sampler's per-token log-probs.

    ``wants_logprobs`` False says its completions come without ``logprobs`` by design (``generation_kwargs`` turned
    them off): the trainer then refuses ``async_generation``, whose rows generated ahead need them for TRL's
    importance-sampling correction. A backend without it is taken to return them.
    """

    @property
    def wants_logprobs(self) -> bool: ...


@runtime_checkable
class SupportsWeightVersion(Protocol):
    """A backend that names the weights it samples from.

    With ``async_generation`` (the built-in vLLM server backend only) the trainer reads ``weight_version`` after each
    ``sync_weights`` and records at which optimizer step that version was written (None: not known, nothing recorded).
    A completion whose ``Completion.weight_version`` is more than ``max_staleness`` steps older than the weights it is
    trained from, or names no version this run recorded, is asked for again from the current weights.
    """

    @property
    def weight_version(self) -> str | None: ...


CAPABILITIES: tuple[type, ...] = (
    SupportsWeightSync,
    SupportsWeightStaging,
    SupportsWriteBehind,
    SupportsDeadline,
    SupportsStats,
    SupportsFailureReasons,
    SupportsCancel,
    SupportsTokenPrompts,
    SupportsContextLength,
    SupportsSamplerLogprobs,
    SupportsWeightVersion,
)

# How close a public name must be to a capability's (`difflib` ratio) to be warned about as a likely misspelling.
_TYPO_CUTOFF = 0.85


def _members(protocol: type) -> Iterator[tuple[str, tuple[str, ...] | None]]:
    """Each member of ``protocol``: its name and the arguments the trainer passes it, positionally (None: a value the
    trainer reads)."""
    for name, member in vars(protocol).items():
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            yield name, None
        else:
            yield name, tuple(inspect.signature(member).parameters)[1:]


def _mismatch(backend: object, protocol: type, name: str, arguments: tuple[str, ...] | None) -> str | None:
    """How ``backend``'s member ``name`` does not have the shape ``protocol`` gives it, or None (fits, or absent)."""
    try:
        static = inspect.getattr_static(backend, name)
    except AttributeError:
        return None
    owner, see = f"{type(backend).__name__}.{name}", f" (see {protocol.__name__})"
    if arguments is None:
        if callable(static) or isinstance(static, classmethod):
            return f"{owner} is a method, but the trainer reads it as a value (an attribute or a property){see}"
        return None
    expected = f"{name}({', '.join(arguments)})"
    if isinstance(static, property):
        return f"{owner} is a property, but the trainer calls it as {expected}{see}"
    member = getattr(backend, name)
    if not callable(member):
        return f"{owner} is a {type(member).__name__}, but the trainer calls it as {expected}{see}"
    try:
        signature = inspect.signature(member)
    except (TypeError, ValueError):  # a callable without an inspectable signature: nothing to check
        return None
    try:
        signature.bind(*arguments)
    except TypeError:
        return f"{owner} has signature {signature}, but the trainer calls it as {expected}{see}"
    return None


def check_backend(backend: object | None) -> None:
    """Check, once, that a backend of your own (None: the trainer builds a built-in one) fits the protocol: a
    ``generate(prompts, counts)`` method, and each capability it defines (`CAPABILITIES`) in the shape the trainer
    uses. Also warn about each public name that is not a capability but looks like a misspelt one (``sync_weight``:
    did you mean ``sync_weights``?).

    Raises:
        TypeError: ``backend`` has no ``generate``, or one of its members does not fit; the message names the backend
            class, each member that does not fit, how the trainer uses it and what it is.
    """
    if backend is None:
        return
    if not isinstance(backend, GenerationBackend):
        raise TypeError(f"generation_backend {backend!r} has no generate(prompts, counts) method.")
    members = [(protocol, *member) for protocol in (GenerationBackend, *CAPABILITIES) for member in _members(protocol)]
    problems = [problem for member in members if (problem := _mismatch(backend, *member)) is not None]
    if problems:
        raise TypeError(
            f"generation_backend {type(backend).__name__} does not fit the backend protocol: {'; '.join(problems)}."
        )
    absent = [name for protocol, name, _ in members if not isinstance(backend, protocol)]
    for name in sorted(name for name in set(dir(backend)) - {name for _, name, _ in members} if name[0] != "_"):
        close = difflib.get_close_matches(name, absent, n=1, cutoff=_TYPO_CUTOFF)
        if close:
            logger.warning(
                "generation_backend %s has %r, which the trainer never uses: did you mean %r?",
                type(backend).__name__,
                name,
                close[0],
            )
