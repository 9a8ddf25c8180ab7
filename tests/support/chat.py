"""The tiny tokenizer with a real reasoning chat template and TRL's response parser, and chat prompts, all offline."""

from __future__ import annotations

from datasets import Dataset
from transformers import PreTrainedTokenizerFast
from trl.chat_template_utils import add_response_schema, qwen3_5_think_chat_template, qwen3_chat_template

from maxent_grpo.tiny_model import build_tiny_tokenizer

# Qwen3 renders the generation prompt as "<|im_start|>assistant\n"; the Qwen3.5 thinking template also opens
# "<think>\n" there, so everything the model writes before "</think>" is reasoning. Both render ASCII only, which the
# character-level tiny tokenizer encodes exactly.
CHAT_TEMPLATES = {"qwen3": qwen3_chat_template, "qwen3_5_think": qwen3_5_think_chat_template}


def reasoning_tokenizer(template: str) -> PreTrainedTokenizerFast:
    """The tiny tokenizer with ``CHAT_TEMPLATES[template]`` and the response template TRL registers for it."""
    tokenizer = build_tiny_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATES[template]
    return add_response_schema(tokenizer)


def chat_dataset(num_prompts: int = 8) -> Dataset:
    """Conversational prompts: one user message "p<i>:" each."""
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": f"p{i}:"}] for i in range(num_prompts)]})
