"""Tool-calling episodes as one completion slot each: a `GenerationBackend` that runs every turn through another one.

TRL 1.16's `_tool_call_loop` generates a first turn, runs the tools the model called, appends their results (as the
chat template renders them) to the ids so far and generates again, up to ``max_tool_calling_iterations`` rounds;
tool-result tokens get 0 in ``tool_mask``. `EpisodeBackend` does the same through the trainer's backend (every turn
is one `TokenPrompt` call, so each turn's prompt ids are those the backend really used), with TRL's chat-template
rendering, response parsing and tool-suffix ids injected (`EpisodeSettings`), and one thing TRL does not have: an
episode that fails (`EpisodeFailed`: a tool or environment fault, a backend fault in any turn) is left out of the
group it belongs to. The generation step then sees a short group, retries the missing slots from the start (a fresh
environment, a fresh reset) and drops the group on every process if it stays short.

Symmetry (invariant I7): a call of `generate` makes the same backend calls on every process whatever its episodes do:
one first-turn call, then one call per tool round, a round taking place while any process has an episode that called
a tool (``any_process``) and fewer than ``max_iterations`` rounds ran. A process without such an episode joins the
round with an empty call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from maxent_grpo.training.generation.collect import AnyProcess, single_process
from maxent_grpo.training.generation.contract.capabilities import SupportsDeadline, SupportsStats
from maxent_grpo.training.generation.contract.completion_check import CompletionCheck
from maxent_grpo.training.generation.contract.episode_trace import EpisodeTrace
from maxent_grpo.training.generation.contract.protocol import (
    BackendContractError,
    Completion,
    GenerationBackend,
    GenerationStopped,
    TokenPrompt,
)
from maxent_grpo.training.generation.episodes.environments import EnvironmentPool, environment_tools, observed_prompt
from maxent_grpo.training.generation.episodes.failure import EpisodeFailed, FailureCause
from maxent_grpo.training.generation.episodes.tool_calls import ToolCallPolicy, run_tool_calls

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EpisodePrompt:
    """A TRL prompt (chat messages) with the dataset row it came from (an environment's ``reset`` arguments)."""

    prompt: list[dict[str, Any]]
    row: Mapping[str, Any]


@dataclass(frozen=True)
class EpisodeSettings:
    """What episodes take from the trainer.

    Attributes:
        render: ``render(messages, tools) -> ids``: the first turn's prompt with the tool schema and generation prompt
            (TRL's ``apply_chat_template`` call).
        parse: ``parse(ids, prefix, tools) -> message``: one assistant turn, tool calls included
            (`trl.chat_template_utils.parse_response`).
        tool_suffix_ids: ``tool_suffix_ids(tool_messages) -> ids``: how the chat template renders tool results after
            an assistant turn, next generation prompt included (TRL's ``_get_tool_suffix_ids``).
        tools: the standalone tools (callables; an environment's methods are added per episode).
        schema_tools: per environment name, the tools its prompts are rendered and parsed with (TRL's ``_env_tools``;
            ``{None: tools}`` without environments).
        max_iterations: tool rounds per episode (``max_tool_calling_iterations``; no limit: a huge number).
        max_completion_length: the episode's whole completion, tool results included, stays within it (TRL's rule).
        max_model_len: a continuation must stay below the model's context length.
        policy: time limit and error policy of tool calls.
    """

    render: Callable[[list[dict[str, Any]], list[Callable[..., Any]]], list[int]]
    parse: Callable[[list[int], list[int], list[Callable[..., Any]]], dict[str, Any]]
    tool_suffix_ids: Callable[[list[dict[str, Any]]], list[int]]
    tools: list[Callable[..., Any]]
    schema_tools: Mapping[str | None, list[Callable[..., Any]]]
    max_iterations: int
    max_completion_length: int
    max_model_len: int
    policy: ToolCallPolicy = field(default_factory=ToolCallPolicy)


@dataclass
class _Episode:
    """One running episode: TRL's per-row state of the tool loop."""

    prompt: list[dict[str, Any]]  # the prompt the episode started from (with the reset observation)
    schema: list[Callable[..., Any]]
    tools: dict[str, Callable[..., Any]]
    environment: Any | None
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] | None = None
    tool_mask: list[int] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    pending: list[dict[str, Any]] | None = None  # tool calls of the last turn
    tool_calls: int = 0
    tool_failures: int = 0

    def completion(self) -> Completion:
        trace = EpisodeTrace(self.prompt, self.messages, self.environment, self.tool_calls, self.tool_failures)
        return Completion(
            text=trace.answer,
            prompt_ids=self.prompt_ids,
            completion_ids=self.completion_ids,
            logprobs=self.logprobs,
            tool_mask=self.tool_mask,
            episode=trace,
        )


class EpisodeBackend:
    """Runs ``counts[i]`` episodes of each `EpisodePrompt` through ``backend``; see the module docstring.

    A group comes back without its failed episodes. ``failures`` counts them by cause ("tool": a tool or environment
    fault; "backend": a turn the backend did not deliver), over this object's life (one generation step), and
    ``reasons`` says why each failed (for the message of a batch in which every group was dropped).
    `GenerationStopped` from the backend goes through once every round is over. ``stats`` and ``set_deadline`` are
    the backend's.
    """

    def __init__(
        self,
        backend: GenerationBackend,
        settings: EpisodeSettings,
        *,
        environments: EnvironmentPool | None,
        check: CompletionCheck,
        any_process: AnyProcess = single_process,
    ) -> None:
        self.backend = backend
        self.settings = settings
        self.environments = environments
        self.check = check
        self.any_process = any_process
        self.failures: dict[FailureCause, int] = {"tool": 0, "backend": 0}
        self.reasons: list[str] = []
        self._kept: Exception | None = None

    @property
    def stats(self) -> dict[str, int] | None:
        """The wrapped backend's counters, read afresh (a server pool builds them at each read)."""
        return self.backend.stats if isinstance(self.backend, SupportsStats) else None

    def set_deadline(self, deadline: float | None) -> None:
        if isinstance(self.backend, SupportsDeadline):
            self.backend.set_deadline(deadline)

    def generate(self, prompts: Sequence[EpisodePrompt], counts: Sequence[int]) -> list[list[Completion]]:
        owners: list[int] = []
        episodes: list[_Episode] = []
        for index, (prompt, count) in enumerate(zip(prompts, counts, strict=True)):
            for _ in range(count):
                episode = self._guarded(lambda prompt=prompt: self._start(prompt))
                if episode is not None:
                    owners.append(index)
                    episodes.append(episode)
        live = self._first_turn(episodes)
        rounds = 0
        while rounds < self.settings.max_iterations and self.any_process(any(e.pending for e in live.values())):
            self._tool_round(live)
            rounds += 1
        self._raise_kept()
        groups: list[list[Completion]] = [[] for _ in prompts]
        for position, owner in enumerate(owners):
            if position in live:
                groups[owner].append(live[position].completion())
        return groups

    def _start(self, prompt: EpisodePrompt) -> _Episode:
        environment, observation = (None, None) if self.environments is None else self.environments.start(prompt.row)
        name = None if self.environments is None else self.environments.name_of(prompt.row)
        tools = list(self.settings.tools) + ([] if environment is None else environment_tools(environment))
        start = observed_prompt(list(prompt.prompt), observation)
        return _Episode(
            prompt=start,
            schema=list(self.settings.schema_tools[name]),
            tools={tool.__name__: tool for tool in tools},
            environment=environment,
        )

    def _guarded(self, action: Callable[[], Any], episode: _Episode | None = None) -> Any:
        """``action()``, or None when it raised (counted; an abandoned environment is let go).

        Nothing an episode raises leaves `generate` early: its rounds are collective, so a process that left them
        would pair its next collective with another process's round. `EpisodeFailed` is a missing slot; any other
        exception (an environment factory or chat template that raises) is one too, counted as a tool or
        environment fault and logged with its type.
        """
        try:
            return action()
        except EpisodeFailed as failure:
            self.failures[failure.cause] += 1
            if failure.abandoned and episode is not None and self.environments is not None:
                self.environments.abandon(episode.environment)
            logger.warning("Episode failed (%s fault): %s; its slot is retried.", failure.cause, failure)
            self.reasons.append(f"episode failed ({failure.cause} fault): {failure}")
            return None
        except Exception as error:  # see the docstring: the rounds go on, the slot is missing
            self.failures["tool"] += 1
            logger.warning("Episode failed: %s: %s; its slot is retried.", type(error).__name__, error)
            self.reasons.append(f"episode failed: {type(error).__name__}: {error}")
            return None

    def _call(self, prompts: list[TokenPrompt], counts: list[int]) -> list[list[Completion]] | None:
        """One backend call (made even when empty); None when it raised (every episode in it fails). A
        `GenerationStopped` or a broken contract is kept and raised once every round is over (`_raise_kept`)."""
        try:
            returned = self.backend.generate(prompts, counts)
        except GenerationStopped as stop:
            self._kept = self._kept or stop
            return None
        except Exception as error:  # the protocol: a raising call makes its slots missing
            logger.warning("Generation backend raised %s in an episode turn: %s", type(error).__name__, error)
            return None
        if len(returned) != len(prompts):
            self._kept = self._kept or BackendContractError(
                f"Generation backend {type(self.backend).__name__} returned {len(returned)} groups for "
                f"{len(prompts)} prompts; a backend must return exactly one (possibly short) group per prompt."
            )
            return None
        return returned

    def _raise_kept(self) -> None:
        kept, self._kept = self._kept, None
        if kept is not None:
            raise kept

    def _turn(self, completion: Completion | None, sent: list[int] | None) -> Completion:
        """A turn's completion, or `EpisodeFailed` when it is missing, unusable or conditioned on other ids."""
        if completion is None:
            raise EpisodeFailed("the backend returned no completion for this turn", cause="backend")
        problem = self.check(completion)
        if problem is not None:
            raise EpisodeFailed(problem, cause="backend")
        if sent is not None and list(completion.prompt_ids) != sent:
            raise EpisodeFailed("the backend changed the prompt ids of a continuing turn", cause="backend")
        return completion

    def _first_turn(self, episodes: list[_Episode]) -> dict[int, _Episode]:
        """Render and generate every episode's first turn (one call, episodes with equal prompt ids grouped)."""
        rendered: dict[tuple[int, ...], list[int]] = {}
        for position, episode in enumerate(episodes):
            ids = self._guarded(lambda e=episode: tuple(self.settings.render(e.prompt, e.schema)), episode)
            if ids is not None:
                rendered.setdefault(ids, []).append(position)
        keys = list(rendered)
        returned = self._call([TokenPrompt(ids) for ids in keys], [len(rendered[ids]) for ids in keys])
        live: dict[int, _Episode] = {}
        for key_index, ids in enumerate(keys):
            group = [] if returned is None else returned[key_index]
            for slot, position in enumerate(rendered[ids]):
                episode = episodes[position]
                completion = group[slot] if slot < len(group) else None
                if self._guarded(lambda c=completion, e=episode: self._begin(e, c), episode):
                    live[position] = episode
        return live

    def _begin(self, episode: _Episode, completion: Completion | None) -> bool:
        turn = self._turn(completion, None)
        episode.prompt_ids = list(turn.prompt_ids)  # what the backend really conditioned on
        episode.completion_ids = list(turn.completion_ids)
        episode.logprobs = None if turn.logprobs is None else list(turn.logprobs)
        episode.tool_mask = [1] * len(turn.completion_ids)
        message = self.settings.parse(episode.completion_ids, episode.prompt_ids, episode.schema)
        episode.messages = [message]
        episode.pending = message.get("tool_calls") or None
        return True

    def _tool_round(self, live: dict[int, _Episode]) -> None:
        """Run the pending tool calls, then one backend call continuing every episode that still fits."""
        continuing: list[tuple[int, list[int]]] = []
        for position, episode in list(live.items()):
            if not episode.pending:
                continue
            ids = self._guarded(lambda e=episode: self._with_tool_results(e), episode)
            if ids is None:
                del live[position]
            elif ids:
                continuing.append((position, ids))
        returned = self._call([TokenPrompt(tuple(ids)) for _, ids in continuing], [1] * len(continuing))
        for index, (position, sent) in enumerate(continuing):
            episode = live[position]
            group = [] if returned is None else returned[index]
            completion = group[0] if group else None
            if not self._guarded(lambda c=completion, e=episode, s=sent: self._continue(e, c, s), episode):
                del live[position]

    def _with_tool_results(self, episode: _Episode) -> list[int]:
        """Append the last turn and its tool results to the chat; return the next turn's prompt ids, or [] when they
        would not fit (the tool results are then taken back and the episode ends as it is, as in TRL)."""
        calls = episode.pending or []
        episode.pending = None
        results = run_tool_calls(calls, episode.tools, self.settings.policy)
        episode.tool_calls += len(calls)
        episode.tool_failures += results.failures
        ids = episode.prompt_ids + episode.completion_ids + self.settings.tool_suffix_ids(results.messages)
        completion_length = len(ids) - len(episode.prompt_ids)
        if completion_length > self.settings.max_completion_length or len(ids) >= self.settings.max_model_len:
            return []
        episode.messages += results.messages
        return ids

    def _continue(self, episode: _Episode, completion: Completion | None, sent: list[int]) -> bool:
        turn = self._turn(completion, sent)
        budget = self.settings.max_completion_length - (len(sent) - len(episode.prompt_ids))
        new_ids = list(turn.completion_ids)[:budget]
        tool_length = len(sent) - len(episode.prompt_ids) - len(episode.completion_ids)
        episode.tool_mask += [0] * tool_length + [1] * len(new_ids)
        if episode.logprobs is not None and turn.logprobs is not None:
            episode.logprobs += [0.0] * tool_length + list(turn.logprobs)[: len(new_ids)]
        else:
            episode.logprobs = None
        episode.completion_ids = sent[len(episode.prompt_ids) :] + new_ids
        message = self.settings.parse(new_ids, sent, episode.schema) if new_ids else {}
        if message:
            episode.messages.append(message)
        episode.pending = message.get("tool_calls") or None
        return True
