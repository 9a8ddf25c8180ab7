"""The prompts of a data set are checked before training: TRL takes text or chat messages, nothing else.

Without these checks a prompt of the wrong type reaches the generation backend, which raises on every attempt (for
an integer prompt, "text input must be of type str"), so every group is retried, then dropped, as if generation had
failed; the same happens to chat prompts when the tokenizer has no chat template.
"""

from __future__ import annotations

import itertools
from typing import Any

from datasets import Dataset, IterableDataset
from transformers import PreTrainedTokenizerBase

from maxent_grpo.cli.usage_error import UsageError

_MESSAGE_KEYS = ("role", "content")
STREAMED_ROWS_CHECKED = 1000


def _kind(prompt: Any) -> str | None:
    """'text', 'chat' (a list of messages with a role and content), or None for anything else."""
    if isinstance(prompt, str):
        return "text"
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(message, dict) and all(key in message for key in _MESSAGE_KEYS) for message in prompt)
    ):
        return "chat"
    return None


def check_prompts(dataset: Dataset | IterableDataset, name: str) -> bool:
    """Every prompt is text, or every prompt is a conversation; returns whether they are conversations. Of a streamed
    data set, the first `STREAMED_ROWS_CHECKED` rows are checked.

    Raises:
        UsageError: the data set is empty, or a row's prompt is neither text nor a list of messages with a role
            and content, or text and conversations are mixed.
    """
    if isinstance(dataset, IterableDataset):
        prompts = [row["prompt"] for row in itertools.islice(dataset, STREAMED_ROWS_CHECKED)]
    else:
        prompts = dataset["prompt"]
    if len(prompts) == 0:
        raise UsageError(f"dataset {name!r} has no rows")
    kinds: set[str] = set()
    for row, prompt in enumerate(prompts):
        kind = _kind(prompt)
        if kind is None:
            shown = repr(prompt) if len(repr(prompt)) <= 60 else repr(prompt)[:57] + "..."
            raise UsageError(
                f"dataset {name!r}: the prompt of row {row} is {shown}, of type {type(prompt).__name__}; expected "
                "text or a list of chat messages with 'role' and 'content'"
            )
        kinds.add(kind)
    if len(kinds) > 1:
        raise UsageError(f"dataset {name!r} mixes text prompts and chat messages; use one kind for every row")
    return kinds == {"chat"}


def check_chat_template(tokenizer: PreTrainedTokenizerBase, model_name: str) -> None:
    """Chat prompts need a tokenizer with a chat template (TRL applies it to every prompt)."""
    if getattr(tokenizer, "chat_template", None) is None:
        raise UsageError(
            f"the dataset's prompts are chat messages, but the tokenizer of model {model_name!r} has no chat "
            "template; use text prompts, or a model whose tokenizer has one"
        )
