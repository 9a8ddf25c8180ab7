"""The completions reward functions receive, built the way TRL 1.16's `GRPOTrainer._generate` builds them.

Stock TRL hands reward functions plain strings for text prompts and one assistant message per completion for
conversational prompts. When the tokenizer carries a response template (new-style ``response_template``, as set by
`trl.chat_template_utils.add_response_schema`) or a legacy ``response_schema``, that message comes from
`trl.chat_template_utils.parse_response` on the completion's ids, with the prompt's ids as prefix, so a chat template
that opens ``<think>`` yields ``{"role": "assistant", "reasoning_content": ..., "content": ...}``. Without one it is
``{"role": "assistant", "content": text}``.

(TRL also checks ``transformers >= 5`` before parsing, since `parse_response` arrived there; this package requires
transformers 5, so that branch always holds.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from transformers import PreTrainedTokenizerBase
from trl.chat_template_utils import parse_response
from trl.data_utils import is_conversational

from maxent_grpo.training.generation.rows import GeneratedRows


def _has_response_parser(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether ``tokenizer`` can parse responses: a new-style ``response_template`` or a legacy ``response_schema``."""
    return (
        getattr(tokenizer, "response_template", None) is not None
        or getattr(tokenizer, "response_schema", None) is not None
    )


def format_completions(
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Any],
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    texts: Sequence[str],
    keep: Sequence[bool],
    messages: Sequence[list[dict[str, Any]] | None] | None = None,
) -> list:
    """Return one completion per row, as stock TRL passes it to reward functions.

    Args:
        tokenizer: the trainer's tokenizer (the inner tokenizer of a processor).
        prompts: the rows' TRL prompts, [B] (text or chat messages); the first decides the format, as in TRL.
        prompt_ids: the ids each row's completion was generated from, [B][P_i] (the parser's prefix).
        completion_ids: each row's sampled ids, [B][C_i].
        texts: each row's decoded completion (special tokens skipped), [B].
        keep: whether a row is data, [B]. A dropped row holds placeholder ids, so it is never parsed: it gets an
            empty completion of the row format (``""``, or one assistant message with empty content).
        messages: per row, its own messages (a tool-calling episode's turns and tool results, as TRL's tool loop
            hands them to reward functions) or None, [B]; a kept row with messages gets them.

    Returns:
        For text prompts the texts (dropped rows emptied), else one ``[message]`` list per row.
    """
    if not prompts or not is_conversational({"prompt": prompts[0]}):
        return [text if kept else "" for text, kept in zip(texts, keep, strict=True)]
    if messages is not None and any(row is not None for row in messages):
        return [
            list(row) if kept and row is not None else [{"role": "assistant", "content": text if kept else ""}]
            for row, text, kept in zip(messages, texts, keep, strict=True)
        ]
    if not _has_response_parser(tokenizer):
        return [
            [{"role": "assistant", "content": text if kept else ""}] for text, kept in zip(texts, keep, strict=True)
        ]
    return [
        [parse_response(tokenizer, list(ids), prefix=list(prefix)) if kept else {"role": "assistant", "content": ""}]
        for prefix, ids, kept in zip(prompt_ids, completion_ids, keep, strict=True)
    ]


def row_completions(tokenizer: PreTrainedTokenizerBase, prompts: Sequence[Any], rows: GeneratedRows) -> list:
    """`format_completions` for a generation step's rows [B] (an episode's own messages included)."""
    messages = [None if trace is None else trace.messages for trace in rows.episodes]
    return format_completions(
        tokenizer, prompts, rows.prompt_ids, rows.completion_ids, rows.texts, rows.keep, messages
    )
