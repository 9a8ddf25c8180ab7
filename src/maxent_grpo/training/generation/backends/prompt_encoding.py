"""Prompt tokenization shared by the backends that talk to an engine in token ids (vLLM colocate and server)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from transformers import PreTrainedTokenizerBase
from trl.data_utils import is_conversational

from maxent_grpo.training.generation.contract.protocol import TokenPrompt


def encode_prompts(
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Any],
    chat_template_kwargs: dict[str, Any] | None = None,
) -> list[list[int]]:
    """Tokenize TRL prompts the way ``GRPOTrainer._tokenize_prompts`` does for text-only data.

    Plain-text prompts are encoded with the tokenizer's defaults; conversational prompts (lists of messages) go through
    the chat template with a generation prompt appended; `TokenPrompt` ids are taken as they are (all prompts of a call
    are of one kind). Returns one list of ids per prompt.
    """
    if not prompts:
        return []
    if isinstance(prompts[0], TokenPrompt):
        return [list(prompt.ids) for prompt in prompts]
    if is_conversational({"prompt": prompts[0]}):
        encoded = tokenizer.apply_chat_template(
            list(prompts),
            add_generation_prompt=True,
            tokenize=True,
            return_dict=True,
            **(chat_template_kwargs or {}),
        )
        return [list(ids) for ids in encoded["input_ids"]]
    return [list(ids) for ids in tokenizer(text=list(prompts))["input_ids"]]
