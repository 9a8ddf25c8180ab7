"""Held-out evaluation of a model: the exact probability of a correct completion, read off its logits.

After training, the held-out benchmarks sample ``n`` completions per held-out prompt
(`maxent_grpo.answer_sampling.sample_completions`) and count the correct ones for the unbiased pass@k
(`maxent_grpo_experiments.pass_at_k`). Where a prompt's correct completions can be listed (a
fixed derivation, finitely many answers), the model's probability ``p`` of a correct sample is also read off its
logits (`correct_probabilities`: the sum over the correct completions of their probabilities, EOS included where the
sampler must stop), which gives the model's own pass@k, ``1 - (1 - p) ** k``, free of sampling noise
(`exact_pass_at_k`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["completion_log_probabilities", "correct_probabilities", "exact_pass_at_k"]


@torch.no_grad()
def completion_log_probabilities(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    pairs: Sequence[tuple[str, str]],
    *,
    append_eos: bool = False,
) -> torch.Tensor:
    """The log-probability of every token of each completion at temperature 1, read off the logits.

    Args:
        model: the model, put in eval mode.
        tokenizer: its tokenizer; every prompt and every completion must encode to one number of tokens each.
        pairs: (prompt, completion) pairs.
        append_eos: whether the EOS token is appended to each completion, its log-probability included.

    Returns:
        A ``(len(pairs), completion tokens)`` tensor: row i, column j is log P(token j of completion i | the prompt and
        the tokens before it).
    """
    model.eval()
    eos = [tokenizer.eos_token_id] if append_eos else []
    ids = torch.tensor([tokenizer(prompt + text)["input_ids"] + eos for prompt, text in pairs])
    length = ids.shape[1] - len(tokenizer(pairs[0][0])["input_ids"])
    logps = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.float().log_softmax(-1)
    return logps[:, -length - 1 : -1].gather(-1, ids[:, -length:].unsqueeze(-1)).squeeze(-1)


def correct_probabilities(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    correct_completions: Callable[[str], Sequence[str]],
    *,
    append_eos: bool = False,
) -> list[float]:
    """Per prompt, the exact probability that one completion sampled at temperature 1
    (`maxent_grpo.answer_sampling.sample_completions`' default) is correct.

    It is the sum over the prompt's correct completions of their probabilities, each the product of its tokens'
    probabilities read off the logits (`completion_log_probabilities`): no sampling noise, unlike a count of correct
    samples.

    Args:
        model: the model, put in eval mode.
        tokenizer: its tokenizer; every prompt and every correct completion must encode to one number of tokens each.
        prompts: the prompts.
        correct_completions: a prompt's correct completions (distinct, as texts).
        append_eos: whether a correct sample must also stop there: the EOS token is appended to each completion, its
            probability included (needed when a correct text followed by other tokens would be graded wrong).

    Returns:
        Per prompt, the probability of a correct completion.
    """
    rows = [(i, prompt, text) for i, prompt in enumerate(prompts) for text in correct_completions(prompt)]
    pairs = [(prompt, text) for _, prompt, text in rows]
    completion_logps = completion_log_probabilities(model, tokenizer, pairs, append_eos=append_eos).sum(-1)
    totals = [0.0] * len(prompts)
    for (i, _, _), logp in zip(rows, completion_logps.tolist(), strict=True):
        totals[i] += math.exp(logp)
    return totals


def exact_pass_at_k(probabilities: Sequence[float], ks: Sequence[int]) -> dict[str, float]:
    """Mean over prompts of the model's own pass@k, ``1 - (1 - p) ** k``, per k of ``ks`` (k as a string).

    These are k samples drawn independently from the model, where the unbiased estimator draws them from n fixed
    samples.
    """
    return {str(k): statistics.fmean(1 - (1 - p) ** k for p in probabilities) for k in ks}
