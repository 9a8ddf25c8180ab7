"""A tiny causal LM and its tokenizer, built in-process and offline.

Used by the test suite, the demo and the CPU benchmarks, so nothing ever touches a model hub. The tokenizer is
character-level (one token per printable ASCII character), which makes "the first token of a completion" the same as
"its first character": the mode-coverage task relies on that.

Transformers and tokenizers have no ready-made "tiny random model with a working tokenizer" builder that works
without a download, hence this module.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from trl.chat_template_utils import add_response_schema, qwen3_chat_template

PAD_TOKEN = "<pad>"
EOS_TOKEN = "<eos>"
BOS_TOKEN = "<bos>"

# A minimal chat template so conversational datasets work with the tiny tokenizer.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def build_tiny_tokenizer(
    characters: str | None = None, *, eos_token: str = EOS_TOKEN, phrases: Sequence[str] = ()
) -> PreTrainedTokenizerFast:
    """Return a character-level fast tokenizer with pad, EOS and BOS tokens and a chat template.

    Ids 0-2 are the special tokens; every character of ``characters`` (default: every printable ASCII character,
    letters, digits, punctuation, space and newline) has its own id. Decoding concatenates characters, so
    ``decode(encode(text)) == text`` for any text over those characters. A small alphabet makes a small action space,
    which lets a random model find a task's correct answers by sampling. ``eos_token`` names the EOS token (id 1);
    each of ``phrases`` (multi-character strings) becomes one token, after the characters, so that a long fixed
    string (a tool call's opening) is one action.
    """
    chars = list(dict.fromkeys(characters)) if characters else [c for c in string.printable if c not in "\t\r\x0b\x0c"]
    vocab = {token: i for i, token in enumerate([PAD_TOKEN, eos_token, BOS_TOKEN, *chars])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=PAD_TOKEN))
    backend.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD_TOKEN,
        eos_token=eos_token,
        bos_token=BOS_TOKEN,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    tokenizer.add_tokens([AddedToken(phrase, normalized=False) for phrase in phrases])
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_tool_tokenizer(phrases: Sequence[str] = ()) -> PreTrainedTokenizerFast:
    r"""The character-level tokenizer with Qwen3's chat template (tool schemas, tool calls, tool results) and the
    response parser TRL registers for it: the tokenizer tool-calling training needs, offline.

    Qwen3's end of turn ``<|im_end|>`` is the EOS token and ``<|im_start|>`` one token; ``phrases`` as in
    `build_tiny_tokenizer` (e.g. ``'<tool_call>\n{"name": "guess", "arguments": {"n": '``).
    """
    tokenizer = build_tiny_tokenizer(eos_token="<|im_end|>", phrases=["<|im_start|>", *phrases])
    tokenizer.chat_template = qwen3_chat_template
    return add_response_schema(tokenizer)


def build_tiny_model(
    tokenizer: PreTrainedTokenizerFast,
    *,
    seed: int = 0,
    hidden_size: int = 32,
    num_layers: int = 1,
    max_completion_length: int = 8,
    max_position_embeddings: int = 256,
    tie_word_embeddings: bool = True,
) -> Qwen2ForCausalLM:
    """Return a randomly initialised 1-layer Qwen2 model whose vocabulary matches ``tokenizer``, its output layer the
    input embedding's transpose unless ``tie_word_embeddings`` is False.

    The initialisation is a deterministic function of ``seed`` (the global RNG is left untouched). The model's
    generation config samples (``do_sample=True``) and stops at the tokenizer's EOS token. Tool-calling prompts (the
    tool schema in characters) need a longer ``max_position_embeddings`` than the default.
    """
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    rng_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    finally:
        torch.random.set_rng_state(rng_state)
    model.generation_config = GenerationConfig(
        do_sample=True,
        max_new_tokens=max_completion_length,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    return model


def save_tiny_model(
    path: str | Path, *, seed: int = 0, hidden_size: int = 32, num_layers: int = 1, tie_word_embeddings: bool = True
) -> Path:
    """Build the tiny model and tokenizer and save both to ``path`` (loadable with ``from_pretrained``)."""
    path = Path(path)
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(
        tokenizer, seed=seed, hidden_size=hidden_size, num_layers=num_layers, tie_word_embeddings=tie_word_embeddings
    )
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
