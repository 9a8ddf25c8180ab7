"""An engine with vLLM's `LLM.generate` interface that really samples with the tiny model (for colocate tests).

It keeps its own copy of the weights, like a vLLM engine does, so weight synchronisation is observable, honours
a structured-outputs regex (see `RegexPrefixProcessor`), and seeds as vLLM does: a request with ``seed`` s and ``n``
completions samples completion k alone from a generator seeded s + k.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import LogitsProcessorList, PreTrainedModel, PreTrainedTokenizerBase

from tests.support.stand_in_vllm.server import RegexPrefixProcessor


@dataclass
class Logprob:
    logprob: float
    rank: int = 1


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]] | None


@dataclass
class RequestOutput:
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput] = field(default_factory=list)


def _structured_outputs_regex(sampling_params: Any) -> str | None:
    """The regex of ``structured_outputs`` (a dict here, vLLM's `StructuredOutputsParams` in vLLM), or None."""
    structured = getattr(sampling_params, "structured_outputs", None)
    if isinstance(structured, dict):
        return structured.get("regex")
    return getattr(structured, "regex", None)


class TinyLLM:
    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, seed: int = 0) -> None:
        self.model = copy.deepcopy(model).eval()
        self.tokenizer = tokenizer
        self.generator_seed = seed
        self.weight_loads = 0
        self.requests: list[int] = []

    def load_weights(self, named_tensors: Any) -> None:
        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for name, tensor in named_tensors:
                params[name].copy_(tensor)
        self.weight_loads += 1

    @torch.no_grad()
    def generate(self, prompts: list[dict[str, Any]], sampling_params: Any, use_tqdm: bool = True) -> list:
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        results = []
        eos = self.tokenizer.eos_token_id
        for prompt, sp in zip(prompts, params, strict=True):
            ids = torch.tensor([prompt["prompt_token_ids"]])
            self.requests.append(sp.n)
            seed = getattr(sp, "seed", None)
            if seed is None:
                samples = self._sample(ids, sp, sp.n)
            else:  # vLLM: completion k of a seeded request is a request of its own, seeded seed + k
                samples = []
                for k in range(sp.n):
                    torch.manual_seed(seed + k)
                    samples += self._sample(ids, sp, 1)
            request = RequestOutput(prompt_token_ids=list(prompt["prompt_token_ids"]))
            for k, (tokens, step_logprobs) in enumerate(samples):
                if eos in tokens:
                    tokens = tokens[: tokens.index(eos) + 1]
                logprobs = None
                if sp.logprobs is not None:
                    logprobs = [{t: Logprob(step_logprobs[j, t].item())} for j, t in enumerate(tokens)]
                text = self.tokenizer.decode(tokens, skip_special_tokens=True)
                request.outputs.append(CompletionOutput(index=k, text=text, token_ids=tokens, logprobs=logprobs))
            results.append(request)
        return results

    def _sample(self, ids: torch.Tensor, sp: Any, n: int) -> list[tuple[list[int], torch.Tensor]]:
        """``n`` completions of the prompt ``ids`` [1, P]: each one's token ids and per-step log-probs [T, V]."""
        regex = _structured_outputs_regex(sp)
        processors = [] if regex is None else [RegexPrefixProcessor(regex, self.tokenizer, ids.shape[1])]
        out = self.model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            temperature=sp.temperature,
            top_p=sp.top_p,
            max_new_tokens=sp.max_tokens,
            num_return_sequences=n,
            output_scores=True,
            return_dict_in_generate=True,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=self.tokenizer.eos_token_id,
            logits_processor=LogitsProcessorList(processors),
        )
        new_tokens = out.sequences[:, ids.shape[1] :]
        step_logprobs = torch.stack([torch.log_softmax(s.float(), dim=-1) for s in out.scores], dim=1)
        return [(new_tokens[k].tolist(), step_logprobs[k]) for k in range(n)]
