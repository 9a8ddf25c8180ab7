"""The environments of tool-calling episodes: one instance per episode, reset at its start, reused across steps.

TRL 1.16 builds the instances and their tool schemas at init (its ``_environment_pool`` and ``_env_tools``, which this
module takes over) and resets one instance per row before generating. Episodes here are retried, so an instance is
drawn and reset per *episode*, through `bounded_call` (a ``reset`` past ``tool_timeout`` or one that raises fails the
episode). Within a step no instance serves two episodes, so the environments of the rows that train still hold their
state when reward functions (and ``get_reward``) read it; at the next step every instance is free again, except one
whose call timed out, which may still be running and is never handed out again.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from maxent_grpo.training.generation.episodes.bounded_call import CallTimedOut, bounded_call
from maxent_grpo.training.generation.episodes.failure import EpisodeFailed

#: Methods of an environment that are not tools (TRL's rule; names starting with "_" are not tools either).
NOT_TOOLS = ("reset", "get_reward")


def environment_tools(environment: Any) -> list[Callable[..., Any]]:
    """The environment's tool methods, bound to it, as TRL finds them (public functions of its class)."""
    return [
        getattr(environment, name)
        for name, _ in inspect.getmembers(type(environment), predicate=inspect.isfunction)
        if name not in NOT_TOOLS and not name.startswith("_")
    ]


def observed_prompt(prompt: list[dict[str, Any]], observation: Any) -> list[dict[str, Any]]:
    """``prompt`` with a ``reset`` observation appended to its last message, as TRL does (None: unchanged)."""
    if observation is None:
        return prompt
    content = prompt[-1]["content"]
    if isinstance(observation, list) and isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if isinstance(observation, str) and isinstance(content, list):
        observation = [{"type": "text", "text": observation}]
    return [*prompt[:-1], {**prompt[-1], "content": content + observation}]


class EnvironmentPool:
    """Environment instances by name, handed out one per episode.

    Args:
        factories: TRL's ``environment_factories`` (``{None: factory}`` for a single environment).
        instances: TRL's ``_environment_pool`` (the probe instances built at init), taken over.
        multi: whether ``environment_factory`` was a dict (each row names its environment in ``environment``).
        timeout: `tool_timeout`, for ``reset``.
        loop: the event loop an async ``reset`` runs on.
    """

    def __init__(
        self,
        factories: Mapping[str | None, Callable[[], Any]],
        instances: Mapping[str | None, list[Any]],
        *,
        multi: bool,
        timeout: float | None,
        loop: asyncio.AbstractEventLoop | None,
    ) -> None:
        self.factories = dict(factories)
        self.instances = {name: list(pool) for name, pool in instances.items()}
        self.multi = multi
        self.timeout = timeout
        self.loop = loop
        self._in_use: set[int] = set()

    def name_of(self, row: Mapping[str, Any]) -> str | None:
        """The environment a dataset row selects (None with a single environment); an unknown name raises."""
        if not self.multi:
            return None
        name = row.get("environment")
        if name not in self.factories:
            raise ValueError(
                f"Example has `environment={name!r}`, which is not among the environments passed to "
                f"`environment_factory`. Expected one of: {list(self.factories)}."
            )
        return name

    def begin_step(self) -> None:
        """Every instance not abandoned is free again (the previous step's rewards have been computed)."""
        self._in_use.clear()

    def start(self, row: Mapping[str, Any]) -> tuple[Any, Any]:
        """Draw a free instance for ``row``'s environment and reset it with the row; return (instance, observation).

        Raises `EpisodeFailed` when ``reset`` raises or runs past the time limit (then the instance is abandoned)."""
        name = self.name_of(row)
        pool = self.instances[name]
        instance = next((env for env in pool if id(env) not in self._in_use), None)
        if instance is None:
            instance = self.factories[name]()
            pool.append(instance)
        self._in_use.add(id(instance))
        kwargs = {key: value for key, value in row.items() if key != "environment"} if self.multi else dict(row)
        try:
            observation = bounded_call(instance.reset, kwargs, timeout=self.timeout, loop=self.loop)
        except CallTimedOut as error:
            self.abandon(instance)
            raise EpisodeFailed(f"environment reset: {error}", cause="tool", abandoned=True) from error
        except Exception as error:  # an environment that crashes on reset fails its episode, under either policy
            raise EpisodeFailed(f"environment reset raised {type(error).__name__}: {error}", cause="tool") from error
        return instance, observation

    def abandon(self, instance: Any) -> None:
        """Never hand ``instance`` out again (a call on it may still be running)."""
        for pool in self.instances.values():
            if any(env is instance for env in pool):
                pool[:] = [env for env in pool if env is not instance]
