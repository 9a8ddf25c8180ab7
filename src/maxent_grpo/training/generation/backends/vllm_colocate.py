"""`VLLMColocateBackend`: an in-process vLLM `LLM` (or any engine with its `generate` interface)."""

from __future__ import annotations

import importlib.util
import logging
import math
from collections.abc import Callable, Iterable, Sequence
from types import SimpleNamespace
from typing import Any, Protocol

import torch
from transformers import PreTrainedTokenizerBase

from maxent_grpo.training.generation.backends.prompt_encoding import encode_prompts
from maxent_grpo.training.generation.backends.request_seeds import RequestSeeds
from maxent_grpo.training.generation.contract.protocol import Completion
from maxent_grpo.training.generation.contract.sampling import SamplingSettings

logger = logging.getLogger(__name__)


class LLMEngine(Protocol):
    """The part of `vllm.LLM` this backend uses: token-id prompts in, a list of `RequestOutput` out."""

    def generate(self, prompts: list[dict[str, Any]], sampling_params: Any, use_tqdm: bool = ...) -> list[Any]: ...


def _to_engine_params(settings: SamplingSettings, n: int, seed: int | None) -> Any:
    """Real `vllm.SamplingParams` when vLLM is importable, else a namespace with the same fields (for test engines).

    As in TRL's `VLLMGeneration`, ``structured_outputs_regex`` becomes ``structured_outputs`` (taking precedence over
    one in ``extra``), and a ``structured_outputs`` dict becomes vLLM's `StructuredOutputsParams`. ``seed`` (the
    request's own, see `request_seeds`) replaces the user's.
    """
    fields = {"n": n, "logprobs": 0, **settings.sampling_fields(), **settings.generation_kwargs}
    if seed is not None:
        fields["seed"] = seed
    if settings.structured_outputs_regex is not None:
        fields["structured_outputs"] = {"regex": settings.structured_outputs_regex}
    if importlib.util.find_spec("vllm") is None:
        return SimpleNamespace(**fields)
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    if isinstance(fields.get("structured_outputs"), dict):
        fields["structured_outputs"] = StructuredOutputsParams(**fields["structured_outputs"])
    return SamplingParams(**fields)


def _sampled_logprobs(token_ids: Sequence[int], position_logprobs: Sequence[dict[int, Any]]) -> list[float]:
    """Pick, at each position, the logprob of the token that was actually sampled (NaN where vLLM has none).

    Raises ValueError when there is not one position per token.
    """
    if len(position_logprobs) != len(token_ids):
        raise ValueError(f"{len(position_logprobs)} logprob positions for {len(token_ids)} tokens")
    values = []
    for token_id, entries in zip(token_ids, position_logprobs, strict=True):
        entry = entries.get(token_id)
        value = None if entry is None else getattr(entry, "logprob", entry)
        values.append(math.nan if value is None else float(value))
    return values


class VLLMColocateBackend:
    """Generate with a vLLM engine living in this process (one engine per training process).

    ``engine`` is a `vllm.LLM` or any object with the same ``generate(prompts, sampling_params, use_tqdm)`` method
    taking ``{"prompt_token_ids": [...]}`` prompts and returning `RequestOutput`-shaped results (``prompt_token_ids``
    and ``outputs[k].token_ids / .text / .logprobs``). Each unique prompt gets its own sampling params with
    ``n = counts[i]``. Weights follow the training model through ``weight_sync`` (the trainer passes TRL's
    `VLLMGeneration.sync_weights`, which handles DeepSpeed, FSDP and PEFT) or, when absent, the engine's own
    ``load_weights(named_tensors)``.

    The sampled tokens' logprobs are asked for (``logprobs=0``) unless `generation_kwargs` sets ``logprobs=None``. A
    completion that comes back without them although they were asked for, or with one entry too few or too many, is
    returned with ``failed=True`` (it counts as missing and is retried) and logged as ``bad data``; a single token
    without a logprob gets NaN, which TRL leaves out of its importance-sampling correction.

    With a ``seed`` in ``generation_kwargs``, each request gets its own seed derived from it (`request_seeds`), so
    that a retry or the other process's half of a group does not repeat completions.

    ``structured_outputs_regex`` (TRL's ``vllm_structured_outputs_regex``) constrains every completion to match it,
    passed to the engine as TRL does.

    Prompts the engine would reject, taking the whole call down with them, are kept from it: prompts that encode to
    no tokens, and, given ``max_model_len`` (the engine's context length), prompts that leave no room for a
    completion. Their groups come back empty, logged as ``bad data``, and the others are generated.

    ``sleep_mode`` (TRL's ``vllm_enable_sleep_mode``, for an engine built with ``enable_sleep_mode=True``) does what
    TRL's `VLLMGeneration.generate` does around each generation: wake the KV cache before it and sleep (level 2,
    which discards the weights) after it; weights discarded by a sleep are pushed again through ``weight_sync``
    before the next generation. Every call does this, including calls with nothing to generate, so all processes
    make the same weight gathers under DeepSpeed ZeRO-3 / FSDP.
    """

    def __init__(
        self,
        engine: LLMEngine,
        tokenizer: PreTrainedTokenizerBase,
        *,
        sampling: SamplingSettings,
        weight_sync: Callable[[], None] | None = None,
        sleep_mode: bool = False,
        max_model_len: int | None = None,
    ) -> None:
        if sleep_mode and weight_sync is None:
            raise ValueError("sleep_mode needs weight_sync: a sleeping engine discards its weights")
        self.engine = engine
        self.tokenizer = tokenizer
        self.weight_sync = weight_sync
        self.sampling = sampling
        extra_structured = sampling.generation_kwargs.get("structured_outputs")
        if sampling.structured_outputs_regex is not None and extra_structured is not None:
            logger.warning(
                "Both structured_outputs_regex and generation_kwargs['structured_outputs'] are set; "
                "structured_outputs_regex takes precedence."
            )
        self.wants_logprobs = sampling.wants_logprobs
        self.sleep_mode = sleep_mode
        self.max_model_len = max_model_len
        self._weights_discarded = sleep_mode  # TRL puts a sleep-mode engine to sleep (level 2) once it is built
        self._seeds = RequestSeeds(sampling.seed, sampling.process_index)

    def generate(self, prompts: Sequence[Any], counts: Sequence[int]) -> list[list[Completion]]:
        if not self.sleep_mode:
            return self._generate(prompts, counts)
        if self._weights_discarded:
            assert self.weight_sync is not None  # checked in __init__
            self.weight_sync()
            self._weights_discarded = False
        try:
            self.engine.wake_up(tags=["kv_cache"])
            return self._generate(prompts, counts)
        finally:
            # Whatever failed, every process ends the call with its weights counted as discarded, so all of them
            # push weights (a collective gather under ZeRO-3 / FSDP) before the next call.
            self._weights_discarded = True
            self.engine.sleep(level=2)

    def _generate(self, prompts: Sequence[Any], counts: Sequence[int]) -> list[list[Completion]]:
        groups: list[list[Completion]] = [[] for _ in prompts]
        asked = [i for i, count in enumerate(counts) if count > 0]
        seeds = dict(zip(asked, self._seeds.next_call(len(asked)), strict=True))
        if not asked:
            return groups
        encoded = encode_prompts(self.tokenizer, [prompts[i] for i in asked], self.sampling.chat_template_kwargs)
        fitting = [(i, ids) for i, ids in zip(asked, encoded, strict=True) if self._fits(ids)]
        if not fitting:
            return groups
        asked = [i for i, _ in fitting]
        requests = [{"prompt_token_ids": ids} for _, ids in fitting]
        params = [_to_engine_params(self.sampling, counts[i], seeds[i]) for i in asked]
        outputs = self.engine.generate(requests, sampling_params=params, use_tqdm=False)
        for index, output in zip(asked, outputs, strict=True):
            used_prompt_ids = [int(t) for t in output.prompt_token_ids]
            for sample in output.outputs[: counts[index]]:
                groups[index].append(self._completion(sample, used_prompt_ids))
        return groups

    def _fits(self, prompt_ids: list[int]) -> bool:
        """Whether the engine can take the prompt; vLLM rejects the whole call for one empty or too long prompt."""
        if not prompt_ids:
            logger.warning("bad data: a prompt encodes to no tokens; its group is not generated")
            return False
        if self.max_model_len is None or len(prompt_ids) < self.max_model_len:
            return True
        logger.warning(
            "bad data: prompt of %d tokens leaves no room for a completion in the engine's max_model_len %d; its "
            "group is not generated",
            len(prompt_ids),
            self.max_model_len,
        )
        return False

    def _completion(self, sample: Any, prompt_ids: list[int]) -> Completion:
        """One `CompletionOutput` as a `Completion`; marked failed when its logprobs are unusable."""
        token_ids = [int(t) for t in sample.token_ids]
        text = sample.text if sample.text is not None else self.tokenizer.decode(token_ids)
        if sample.logprobs is None:
            if self.wants_logprobs:
                logger.warning("bad data: completion without logprobs although they were asked for, marked failed")
                return Completion(text=text, prompt_ids=prompt_ids, completion_ids=token_ids, failed=True)
            return Completion(text=text, prompt_ids=prompt_ids, completion_ids=token_ids)
        try:
            logprobs = _sampled_logprobs(token_ids, sample.logprobs)
        except ValueError as exc:
            logger.warning("bad data: %s, completion marked failed", exc)
            return Completion(text=text, prompt_ids=prompt_ids, completion_ids=token_ids, failed=True)
        return Completion(text=text, prompt_ids=prompt_ids, completion_ids=token_ids, logprobs=logprobs)

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Push the training weights into the engine."""
        if self.weight_sync is not None:
            self.weight_sync()
            self._weights_discarded = False
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
