"""Build episodes' settings and environment pool from what TRL 1.16's `GRPOTrainer.__init__` prepared.

TRL's init already does the tool work worth keeping: it probes each environment (``reset`` required, its public methods
become tools, a ``get_reward`` becomes a reward function named after the class), sets the tokenizer's response parser
(`add_response_schema`), swaps in a prefix-preserving training chat template where needed, checks the template can
render tool calls and starts the event loop async tools run on. These functions only read that state (except that TRL
starts that loop only for async reward functions and tools, an environment's tools included, not for an async
``reset``: `take_over_environments` starts it then); the per-row environment resets TRL would do before generating are
taken over by the episodes (`take_over_environments`).
"""

from __future__ import annotations

import atexit
from typing import TYPE_CHECKING, Any

from trl.chat_template_utils import parse_response
from trl.trainer.utils import is_async_callable, shutdown_event_loop_in_daemon, start_event_loop_in_daemon

from maxent_grpo.collectives import Collectives
from maxent_grpo.training.generation.contract.capabilities import SupportsContextLength
from maxent_grpo.training.generation.contract.completion_check import CompletionCheck
from maxent_grpo.training.generation.contract.protocol import GenerationBackend
from maxent_grpo.training.generation.episodes.backend import EpisodeBackend, EpisodePrompt, EpisodeSettings
from maxent_grpo.training.generation.episodes.environments import EnvironmentPool, environment_tools
from maxent_grpo.training.generation.episodes.tool_calls import ToolCallPolicy

if TYPE_CHECKING:
    from trl import GRPOTrainer


def take_over_environments(trainer: GRPOTrainer) -> EnvironmentPool | None:
    """The trainer's environments as a pool for episodes (None without ``environment_factory``).

    Sets the trainer's ``environment_factories`` to None, so that TRL's ``_generate_and_score_completions`` neither
    draws nor resets instances per row: each episode draws and resets its own (and a retried episode a fresh one).
    When an environment's ``reset`` (or a tool method) is ``async def`` and TRL started no event loop (it does for
    async reward functions and tools only), the loop is started here, as TRL starts it. The probe instances TRL built
    (one per environment) are what is looked at: a factory that returns instances of several classes is judged by
    its first.
    """
    factories = trainer.environment_factories
    if factories is None:
        return None
    if getattr(trainer, "async_loop", None) is None and any(
        _has_async_method(instance) for instances in trainer._environment_pool.values() for instance in instances
    ):
        trainer.async_loop_thread, trainer.async_loop, trainer.async_loop_ready_event = start_event_loop_in_daemon(
            name="GRPOTrainer-AsyncLoop"
        )
        trainer.async_loop_ready_event.wait()
        atexit.register(shutdown_event_loop_in_daemon, trainer.async_loop_thread, trainer.async_loop)
    pool = EnvironmentPool(
        factories,
        trainer._environment_pool,
        multi=trainer._multi_environment,
        timeout=trainer.args.tool_timeout,
        loop=getattr(trainer, "async_loop", None),
    )
    trainer.environment_factories = None
    return pool


def _has_async_method(environment: Any) -> bool:
    """Whether ``environment``'s ``reset`` or one of its tools (as TRL finds them) is async."""
    return any(is_async_callable(method) for method in (environment.reset, *environment_tools(environment)))


def episode_settings(
    trainer: GRPOTrainer, environments: EnvironmentPool | None, max_model_len: int
) -> EpisodeSettings:
    """TRL's rendering, parsing and tool-suffix ids, its tools and limits, and the tool policy of ``trainer.args``."""
    tokenizer = trainer._tokenizer

    def render(messages: list[dict[str, Any]], tools: list[Any]) -> list[int]:
        tokenized = trainer.processing_class.apply_chat_template(
            conversation=[messages],
            tools=tools or None,  # as TRL: some templates render tool boilerplate for tools=[]
            chat_template=trainer.chat_template,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=True,
            **trainer.chat_template_kwargs,
        )
        return list(tokenized["input_ids"][0])

    def parse(ids: list[int], prefix: list[int], tools: list[Any]) -> dict[str, Any]:
        return parse_response(tokenizer, ids, prefix=prefix, tools=tools)

    schema_tools = dict(trainer._env_tools) if environments is not None else {None: list(trainer.tools)}
    args = trainer.args
    return EpisodeSettings(
        render=render,
        parse=parse,
        tool_suffix_ids=trainer._get_tool_suffix_ids,
        tools=list(trainer._standalone_tools),
        schema_tools=schema_tools,
        max_iterations=trainer.max_tool_calling_iterations,
        max_completion_length=trainer.max_completion_length,
        max_model_len=max_model_len,
        policy=ToolCallPolicy(args.tool_timeout, args.tool_error_policy, getattr(trainer, "async_loop", None)),
    )


def context_length(trainer: GRPOTrainer) -> int:
    """The longest sequence an episode's turn may reach: the engine's ``max_model_len``, else the model's."""
    backend = trainer.generation_backend
    if isinstance(backend, SupportsContextLength) and (engine_length := backend.max_model_len) is not None:
        return int(engine_length)
    config = trainer.model.config
    return int(getattr(config, "text_config", config).max_position_embeddings)


def step_backend(
    trainer: Any, prompts: list, check: CompletionCheck, collectives: Collectives
) -> tuple[GenerationBackend, list]:
    """The backend a generation step collects from and what it is asked: the trainer's backend and the prompts, or,
    with tools or environments, episodes run through it and the prompts with their dataset rows (`reset` arguments)."""
    if trainer.episode_settings is None:
        return trainer.generation_backend, prompts
    if trainer.environment_pool is not None:
        trainer.environment_pool.begin_step()
    backend = EpisodeBackend(
        trainer.generation_backend,
        trainer.episode_settings,
        environments=trainer.environment_pool,
        check=check,
        any_process=collectives.any,
    )
    rows = [] if trainer._batch is None else trainer._batch.inputs
    return backend, [EpisodePrompt(prompt, row) for prompt, row in zip(prompts, rows, strict=True)]
