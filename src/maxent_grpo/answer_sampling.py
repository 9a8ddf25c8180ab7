"""Completions sampled from a model as in training: what `maxent-grpo demo` counts its answers on after training.

`sample_completions` draws ``n`` completions per prompt at the training temperature (no top-k, no top-p) under a seed
of its own, leaving the global RNG untouched.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["sample_completions"]


@torch.no_grad()
def sample_completions(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    n: int,
    seed: int,
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    keep_special_tokens: bool = False,
) -> list[list[str]]:
    """``n`` completions per prompt, sampled at ``temperature`` (no top-k, no top-p) as in training.

    Args:
        model: the model, put in eval mode.
        tokenizer: its tokenizer; every prompt must encode to the same number of tokens.
        prompts: the prompts.
        n: completions per prompt.
        seed: the sampling seed; the global RNG is left untouched.
        max_new_tokens: the most tokens of a completion (the EOS token included).
        temperature: the sampling temperature (1: the model's own distribution).
        keep_special_tokens: False: the text with special tokens skipped, as reward functions receive it. True: the
            text up to the first EOS token, any other special token kept by name (``"<pad>"``), so that a grader
            that compares whole strings accepts exactly the token sequences that spell a correct completion and
            then stop (a completion that ran out of tokens before EOS keeps its full text).

    Returns:
        Per prompt, its ``n`` completions.
    """
    model.eval()
    ids = torch.tensor([tokenizer(p)["input_ids"] for p in prompts], device=model.device).repeat_interleave(n, dim=0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        output = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_k=0,
            top_p=1.0,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    completions = output[:, ids.shape[1] :]
    if keep_special_tokens:
        texts = []
        for row in completions.tolist():
            stop = row.index(tokenizer.eos_token_id) if tokenizer.eos_token_id in row else len(row)
            texts.append(tokenizer.decode(row[:stop], skip_special_tokens=False))
    else:
        texts = tokenizer.batch_decode(completions, skip_special_tokens=True)
    return [texts[i * n : (i + 1) * n] for i in range(len(prompts))]
