"""`RolloutFunctionBackend`: TRL 1.16's ``rollout_func`` as a generation backend, so its rows are retried and dropped.

TRL calls ``rollout_func(prompts, trainer)`` once per batch with every row's prompt and trains on what it returns
(``prompt_ids``, ``completion_ids``, ``logprobs`` per row, optional ``env_mask``; other keys go to reward functions).
Here it is called with each prompt repeated for the slots still missing, and each row it returns becomes one
`Completion`: a row with ids outside the vocabulary, logprobs or ``env_mask`` of the wrong length, or no completion
is a missing slot (`CompletionCheck`), retried like any other. A return whose keys or row count are wrong is a
programming error and stops training with `BackendContractError` (a ``ValueError``, as TRL raises on missing keys).
Its other keys reach reward functions as TRL passes them: a list holds one value per row (each row keeps its own, also
when it is retried), anything else is every row's.

Every process calls ``rollout_func`` in every round of a generation step, with an empty list when it has no slot
missing: a ``rollout_func`` that makes collective calls (TRL's ``trainer.vllm_generation.generate`` gathers the
prompts of every process) then meets the same calls on every process, as under TRL. It must accept an empty list.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from maxent_grpo.training.generation.contract.capabilities import SupportsWeightSync
from maxent_grpo.training.generation.contract.protocol import BackendContractError, Completion

REQUIRED_KEYS = ("prompt_ids", "completion_ids", "logprobs")


def _as_list(values: Any) -> list[Any] | None:
    """A row's values as a list: a sequence, or a numpy array or torch tensor (``tolist()``) of one dimension."""
    if hasattr(values, "tolist") and getattr(values, "ndim", None) == 1:
        values = values.tolist()
    if not isinstance(values, Sequence) or isinstance(values, str):
        return None
    return list(values)


def _ids(values: Any) -> list[int] | None:
    """``values`` as token ids, or None when they are not a sequence of integers (numpy's integers included)."""
    listed = _as_list(values)
    if listed is None or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in listed):
        return None
    return [int(value) for value in listed]


def _numbers(values: Any) -> list[float] | None:
    """``values`` as floats, or None when they are not a sequence of real numbers (numpy's included)."""
    listed = _as_list(values)
    if listed is None or not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in listed):
        return None
    return [float(value) for value in listed]


def _row_value(value: Any, row: int) -> Any:
    """A row's value of an extra key, as TRL reads it: a list's item (None past its end), anything else itself."""
    if isinstance(value, list):
        return value[row] if row < len(value) else None
    return value


class RolloutFunctionBackend:
    """Generate by calling a user's ``rollout_func(prompts, trainer)``.

    Args:
        rollout_func: TRL's ``rollout_func``.
        trainer: passed to it as its second argument.
        decode: ids -> text (special tokens skipped), for the completion's ``text``.
        vocab_size: ids outside ``[0, vocab_size)`` are not decoded (the completion check rejects them).
        weights: the backend whose ``sync_weights`` keeps the engine ``rollout_func`` samples from on the current
            weights (TRL syncs its vLLM engine before calling ``rollout_func``), or None.
    """

    def __init__(
        self,
        rollout_func: Callable[[list[Any], Any], dict[str, Any]],
        trainer: Any,
        decode: Callable[[list[int]], str],
        vocab_size: int,
        weights: Any | None = None,
    ) -> None:
        self.rollout_func = rollout_func
        self.trainer = trainer
        self.decode = decode
        self.vocab_size = vocab_size
        if isinstance(weights, SupportsWeightSync):  # only then does the trainer sync (and wait for every process)
            self.sync_weights = weights.sync_weights

    def generate(self, prompts: Sequence[Any], counts: Sequence[int]) -> list[list[Completion]]:
        rows = [prompt for prompt, count in zip(prompts, counts, strict=True) for _ in range(count)]
        groups: list[list[Completion]] = [[] for _ in prompts]
        output = self.rollout_func(rows, self.trainer)  # on every process, rows or none (see the module docstring)
        missing = sorted(set(REQUIRED_KEYS) - set(output))
        if missing:
            raise BackendContractError(f"rollout_func must return keys {missing} in its output dict.")
        env_mask = output.get("env_mask")
        for key in (*REQUIRED_KEYS, "env_mask"):
            values = output.get(key)
            if values is not None and len(values) != len(rows):
                raise BackendContractError(
                    f"rollout_func returned {len(values)} rows of {key!r} for {len(rows)} prompts; it must return one "
                    "row per prompt it receives."
                )
        logprobs = output["logprobs"]
        extra = {key: value for key, value in output.items() if key not in (*REQUIRED_KEYS, "env_mask")}
        row = 0
        for index, count in enumerate(counts):
            for _ in range(count):
                completion = self._completion(
                    output["prompt_ids"][row],
                    output["completion_ids"][row],
                    None if logprobs is None else logprobs[row],
                    None if env_mask is None else env_mask[row],
                )
                fields = {key: _row_value(value, row) for key, value in extra.items()}
                groups[index].append(replace(completion, extra_fields=fields or None))
                row += 1
        return groups

    def _completion(self, prompt_ids: Any, completion_ids: Any, logprobs: Any, mask: Any) -> Completion:
        """One row; ids that are not integers, or log-probs that are not numbers, make it a failed completion."""
        prompt, completion = _ids(prompt_ids), _ids(completion_ids)
        tool_mask = None if mask is None else _ids(mask)
        numbers = None if logprobs is None else _numbers(logprobs)
        if prompt is None or completion is None or (mask is not None and tool_mask is None):
            return Completion(text="", prompt_ids=[], completion_ids=[], failed=True)
        if logprobs is not None and numbers is None:
            return Completion(text="", prompt_ids=prompt, completion_ids=completion, failed=True)
        decodable = all(0 <= token < self.vocab_size for token in completion)
        return Completion(
            text=self.decode(completion) if decodable else "",
            prompt_ids=prompt,
            completion_ids=completion,
            logprobs=numbers,
            tool_mask=tool_mask,
        )
