"""`VLLMColocateBackend`: an in-process vLLM `LLM` (or any engine with its `generate` interface)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable, Sequence
from types import SimpleNamespace
from typing import Any, Protocol

import torch
from transformers import PreTrainedTokenizerBase

from maxent_grpo.training.generation.backends.prompt_encoding import encode_prompts
from maxent_grpo.training.generation.backends.protocol import Completion
from maxent_grpo.training.generation.backends.sampling import SamplingSettings


class LLMEngine(Protocol):
    """The part of `vllm.LLM` this backend uses: token-id prompts in, `RequestOutput`s out."""

    def generate(self, prompts: list[dict[str, Any]], sampling_params: Any, use_tqdm: bool = ...) -> list[Any]: ...


def _to_engine_params(settings: SamplingSettings, n: int, extra: dict[str, Any]) -> Any:
    """Real `vllm.SamplingParams` when vLLM is importable, else a namespace with the same fields (for test engines)."""
    fields = {"n": n, "logprobs": 0, **settings.as_dict(), **extra}
    if importlib.util.find_spec("vllm") is None:
        return SimpleNamespace(**fields)
    from vllm import SamplingParams

    return SamplingParams(**fields)


def _sampled_logprobs(token_ids: Sequence[int], position_logprobs: Sequence[dict[int, Any]] | None) -> list | None:
    """Pick, at each position, the logprob of the token that was actually sampled."""
    if position_logprobs is None:
        return None
    values = []
    for token_id, entries in zip(token_ids, position_logprobs, strict=True):
        entry = entries.get(token_id)
        values.append(float("nan") if entry is None else float(getattr(entry, "logprob", entry)))
    return values


class VLLMColocateBackend:
    """Generate with a vLLM engine living in this process (one engine per training process).

    ``engine`` is a `vllm.LLM` or any object with the same ``generate(prompts, sampling_params, use_tqdm)`` method
    taking ``{"prompt_token_ids": [...]}`` prompts and returning `RequestOutput`-shaped results (``prompt_token_ids``
    and ``outputs[k].token_ids / .text / .logprobs``). Each unique prompt gets its own sampling params with
    ``n = counts[i]``. Weights follow the training model through ``weight_sync`` (the trainer passes TRL's
    `VLLMGeneration.sync_weights`, which handles DeepSpeed, FSDP and PEFT) or, when absent, the engine's own
    ``load_weights(named_tensors)``.
    """

    def __init__(
        self,
        engine: LLMEngine,
        tokenizer: PreTrainedTokenizerBase,
        *,
        max_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        min_p: float = 0.0,
        repetition_penalty: float = 1.0,
        generation_kwargs: dict[str, Any] | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        weight_sync: Callable[[], None] | None = None,
    ) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.chat_template_kwargs = chat_template_kwargs or {}
        self.weight_sync = weight_sync
        self._settings = SamplingSettings(
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            min_p=min_p,
            repetition_penalty=repetition_penalty,
        )
        self._extra = dict(generation_kwargs or {})

    def generate(self, prompts: Sequence[Any], counts: Sequence[int]) -> list[list[Completion]]:
        groups: list[list[Completion]] = [[] for _ in prompts]
        asked = [i for i, count in enumerate(counts) if count > 0]
        if not asked:
            return groups
        prompt_ids = encode_prompts(self.tokenizer, [prompts[i] for i in asked], self.chat_template_kwargs)
        requests = [{"prompt_token_ids": ids} for ids in prompt_ids]
        params = [_to_engine_params(self._settings, counts[i], self._extra) for i in asked]
        outputs = self.engine.generate(requests, sampling_params=params, use_tqdm=False)
        for index, output in zip(asked, outputs, strict=True):
            used_prompt_ids = [int(t) for t in output.prompt_token_ids]
            for sample in output.outputs[: counts[index]]:
                token_ids = [int(t) for t in sample.token_ids]
                text = sample.text if sample.text is not None else self.tokenizer.decode(token_ids)
                groups[index].append(
                    Completion(
                        text=text,
                        prompt_ids=used_prompt_ids,
                        completion_ids=token_ids,
                        logprobs=_sampled_logprobs(token_ids, sample.logprobs),
                    )
                )
        return groups

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Push the training weights into the engine."""
        if self.weight_sync is not None:
            self.weight_sync()
            return
        load_weights: Callable[[Iterable[tuple[str, torch.Tensor]]], Any] | None = getattr(
            self.engine, "load_weights", None
        )
        if load_weights is None:
            raise TypeError(
                f"{type(self.engine).__name__} has no load_weights(named_tensors) and no weight_sync was given: "
                "the engine would keep sampling from stale weights."
            )
        with torch.no_grad():
            load_weights((name, param.detach()) for name, param in model.named_parameters())
