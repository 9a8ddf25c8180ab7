"""Run the tool calls of one assistant turn and turn their results into TRL's tool messages.

TRL 1.16's `_tool_call_loop` does this inline, with no time limit and no choice about errors (a raising tool always
becomes an ``{'error': ...}`` message), and runs a turn's async calls after its sync ones. This module keeps TRL's
messages and error feedback as the default, runs the calls in the order the model made them, and adds the two
policies TRL lacks: ``timeout`` (a call past it fails the episode) and ``on_error="retry"`` (a raising call fails the
episode instead of being fed back).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from maxent_grpo.training.generation.episodes.bounded_call import CallTimedOut, bounded_call
from maxent_grpo.training.generation.episodes.failure import EpisodeFailed


@dataclass(frozen=True)
class ToolCallPolicy:
    """How tool calls run.

    Attributes:
        timeout: seconds one call may take (`tool_timeout`); None: wait.
        on_error: "feedback" (TRL's) or "retry" (`tool_error_policy`).
        loop: the event loop async tools run on (TRL's daemon loop), or None when no tool is async.
    """

    timeout: float | None = None
    on_error: Literal["feedback", "retry"] = "feedback"
    loop: asyncio.AbstractEventLoop | None = None


@dataclass(frozen=True)
class ToolResults:
    """The tool messages of one turn, in call order, and how many of its calls failed and were fed back."""

    messages: list[dict[str, Any]]
    failures: int


def run_tool_calls(
    tool_calls: Sequence[Mapping[str, Any]], tools: Mapping[str, Callable[..., Any]], policy: ToolCallPolicy
) -> ToolResults:
    """Call each tool the model asked for; raise `EpisodeFailed` where ``policy`` says the episode cannot go on.

    A call of an unknown tool, of a type other than "function", or with arguments the tool rejects counts as a raising
    call. A result that is a list (content blocks) is passed through as the message content, anything else as its
    ``str``, as in TRL.
    """
    messages: list[dict[str, Any]] = []
    failures = 0
    for call in tool_calls:
        name = str(call.get("function", {}).get("name", call.get("name", "unknown")))
        try:
            if call.get("type") != "function":
                raise ValueError(f"Unsupported tool call type: {call.get('type')}")
            if name not in tools:
                raise ValueError(f"Tool {name} not found.")
            arguments = call["function"].get("arguments") or {}
            if not isinstance(arguments, Mapping):
                raise TypeError(f"arguments of {name} are not a mapping: {arguments!r}")
            result = bounded_call(tools[name], dict(arguments), timeout=policy.timeout, loop=policy.loop)
        except CallTimedOut as error:
            raise EpisodeFailed(f"tool {name}: {error}", cause="tool", abandoned=True) from error
        except Exception as error:  # a tool's own failure: fed back to the model (TRL) or failing the episode
            if policy.on_error == "retry":
                raise EpisodeFailed(f"tool {name} raised {type(error).__name__}: {error}", cause="tool") from error
            failures += 1
            result = {"error": str(error)}
        content = result if isinstance(result, list) else str(result)
        messages.append({"role": "tool", "name": name, "content": content})
    return ToolResults(messages, failures)
