"""What a finished tool-calling episode leaves besides its token ids: its prompt, its messages, its environment."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class EpisodeTrace:
    """One episode (every turn of one completion slot), as reward functions and metrics need it.

    Attributes:
        prompt: the TRL prompt the episode started from, the environment's ``reset`` observation included (messages).
        messages: the completion as TRL hands it to reward functions: the parsed assistant turns with the tool
            messages between them.
        environment: the environment instance the episode ran in (reward functions receive it as ``environments``,
            ``get_reward`` reads its state), or None without ``environment_factory``.
        tool_calls: tool calls the model made in the episode.
        tool_failures: those that failed and were fed back to the model as ``{'error': ...}``.
    """

    prompt: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    environment: Any | None
    tool_calls: int
    tool_failures: int

    @property
    def answer(self) -> str:
        """The content of the episode's last assistant message (its final answer; "" when it has none)."""
        for message in reversed(self.messages):
            if message.get("role") == "assistant":
                content = message.get("content")
                return content if isinstance(content, str) else ""
        return ""
