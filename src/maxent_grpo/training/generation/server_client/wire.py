"""The ``POST /v1/completions`` wire format of a vLLM server: request bodies, and answers read as `Completion` objects.

A request asks for ``n`` completions of one token-id prompt with ``return_token_ids`` and
``return_tokens_as_token_ids``, so the server reports the exact prompt and completion ids it used and keys every
logprob as ``"token_id:<id>"``; ``logprobs: 0`` asks for the sampled tokens' log-probs. Reading an answer never
raises on bad data: a choice that cannot be a completion is skipped, one that can but is unusable comes back with
``failed=True``, and each such case is reported as a problem message for the caller to log and count.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from maxent_grpo.training.generation.contract.completion_check import CompletionCheck
from maxent_grpo.training.generation.contract.protocol import Completion
from maxent_grpo.training.generation.contract.sampling import SamplingSettings
from maxent_grpo.training.generation.server_client.http_deadline import Answer

#: The request fields set by the backend itself, which ``generation_kwargs`` may not override (that would break the
#: grouping of the answer or its token-level payload).
RESERVED_REQUEST_FIELDS = frozenset({"prompt", "n", "return_token_ids", "return_tokens_as_token_ids", "stream"})


class MalformedAnswer(ValueError):
    """A completions answer without a list of choices; the message says what came instead."""


@dataclass(frozen=True)
class ParsedChoice:
    """One choice of an answer, read.

    Attributes:
        completion: the completion (``failed=True`` when unusable), or None when the choice has no token ids at all.
        problem: why the choice is bad data (logged and counted by the caller), or None.
    """

    completion: Completion | None
    problem: str | None = None


def check_generation_kwargs(generation_kwargs: Mapping[str, Any]) -> None:
    """Refuse ``generation_kwargs`` that set a field the request format reserves (`RESERVED_REQUEST_FIELDS`).

    Args:
        generation_kwargs: the extra request fields of `SamplingSettings`.

    Raises:
        ValueError: one of them is reserved.
    """
    reserved = sorted(RESERVED_REQUEST_FIELDS & generation_kwargs.keys())
    if reserved:
        raise ValueError(
            f"generation_kwargs must not set {reserved}: the backend sets them itself, got {generation_kwargs!r}"
        )


def completion_payload(
    model: str, prompt_ids: list[int], count: int, sampling: SamplingSettings, seed: int | None
) -> dict[str, Any]:
    """The JSON body of one completion request.

    Args:
        model: the served model id (``generation_kwargs["model"]``, an adapter's name, overrides it).
        prompt_ids: the prompt's token ids.
        count: how many completions to ask for (``n``).
        sampling: how to sample. Its ``structured_outputs_regex`` is sent as ``structured_outputs: {"regex": ...}``,
            the way TRL's `VLLMClient` sends it; its ``generation_kwargs`` override every field but the reserved
            ones and the seed.
        seed: this request's seed, or None to send none beyond ``generation_kwargs``'.

    Returns:
        The request body.
    """
    regex = sampling.structured_outputs_regex
    return {
        "model": model,
        "prompt": prompt_ids,
        "n": count,
        **sampling.sampling_fields(),
        "logprobs": 0,
        **({} if regex is None else {"structured_outputs": {"regex": regex}}),
        "return_token_ids": True,
        "return_tokens_as_token_ids": True,
        **sampling.generation_kwargs,
        **({} if seed is None else {"seed": seed}),
    }


def answer_choices(answer: Answer) -> list[Any]:
    """The ``choices`` list of a completions answer.

    Args:
        answer: a 2xx answer to a completion request.

    Returns:
        Its choices, unread.

    Raises:
        MalformedAnswer: the body is not JSON, has no ``choices``, or they are not a list.
    """
    try:
        choices = answer.json()["choices"]
    except (ValueError, KeyError, TypeError) as exc:
        raise MalformedAnswer(f"answered without a choices list ({type(exc).__name__}: {exc})") from exc
    if not isinstance(choices, list):
        raise MalformedAnswer(f"answered with choices of type {type(choices).__name__}")
    return choices


def group_size_problem(received: int, count: int) -> str | None:
    """Why ``received`` choices are bad data when ``count`` were asked for (short or long group), or None."""
    if received < count:
        return f"short group: got {received} of {count}"
    if received > count:
        return f"long group: got {received} of {count}, extra ones dropped"
    return None


def parse_choice(
    choice: Any, sent_prompt_ids: list[int], *, check: CompletionCheck, wants_logprobs: bool
) -> ParsedChoice:
    """Read one choice of a completions answer as a `Completion`.

    The prompt ids are those the server reports (``prompt_token_ids``), else the ones sent. The completion is marked
    failed when its ids are empty or outside the vocabulary (`CompletionCheck.completion_ids_problem`), when it has no
    logprobs although they were asked for, or when its logprobs are malformed. A single token whose logprob is null
    or NaN is not bad data: it keeps NaN, which TRL leaves out of its importance-sampling correction.

    Args:
        choice: one entry of the answer's ``choices``.
        sent_prompt_ids: the prompt ids the request sent.
        check: the completion check whose vocabulary the ids must lie in.
        wants_logprobs: whether the request asked for logprobs.

    Returns:
        The completion (None when the choice has no token id list) and the bad-data problem, if any.
    """
    if not isinstance(choice, dict) or not _is_token_id_list(choice.get("token_ids")):
        return ParsedChoice(None, "choice without a token_ids list (is the server a vLLM with return_token_ids?)")
    token_ids: list[int] = choice["token_ids"]
    text = choice.get("text")
    text = text if isinstance(text, str) else ""
    prompt_ids = choice.get("prompt_token_ids")
    prompt_ids = prompt_ids if _is_token_id_list(prompt_ids) else sent_prompt_ids
    failed = Completion(text=text, prompt_ids=prompt_ids, completion_ids=token_ids, failed=True)
    problem = check.completion_ids_problem(token_ids)
    if problem is not None:
        return ParsedChoice(failed, f"{problem}, completion marked failed")
    if choice.get("logprobs") is None:
        if wants_logprobs:
            return ParsedChoice(failed, "no logprobs although they were asked for, completion marked failed")
        return ParsedChoice(Completion(text=text, prompt_ids=prompt_ids, completion_ids=token_ids))
    try:
        logprobs = sampled_logprobs(choice["logprobs"], token_ids)
    except ValueError as exc:
        return ParsedChoice(failed, f"{exc}, completion marked failed")
    return ParsedChoice(Completion(text=text, prompt_ids=prompt_ids, completion_ids=token_ids, logprobs=logprobs))


def sampled_logprobs(choice_logprobs: Any, token_ids: list[int]) -> list[float]:
    """Return the logprob of each sampled token from a completions-format ``logprobs`` object.

    The object is ``{"tokens": [...], "token_logprobs": [...], "top_logprobs": [...]}`` with every token written
    ``"token_id:<id>"``. As in TRL's `parse_logprobs`, a position's entries are the sampled token's plus its
    alternatives; the entry whose id equals the sampled id is kept. A null or NaN value for that entry (vLLM could not
    score the token) becomes NaN.

    Args:
        choice_logprobs: a choice's ``logprobs``.
        token_ids: the choice's sampled token ids.

    Returns:
        One float per sampled token.

    Raises:
        ValueError: the object is malformed, its length differs from ``token_ids``', or a sampled token has no entry.
    """
    if not isinstance(choice_logprobs, dict):
        raise ValueError(f"malformed logprobs of type {type(choice_logprobs).__name__}")
    tokens, values = choice_logprobs.get("tokens"), choice_logprobs.get("token_logprobs")
    alternatives = choice_logprobs.get("top_logprobs") or [None] * len(token_ids)
    if not (isinstance(tokens, list) and isinstance(values, list) and isinstance(alternatives, list)):
        raise ValueError("malformed logprobs (tokens, token_logprobs and top_logprobs must be lists)")
    if not len(tokens) == len(values) == len(alternatives) == len(token_ids):
        raise ValueError(f"{len(values)} logprobs for {len(token_ids)} tokens")
    sampled = []
    for position, (token_id, token, value, others) in enumerate(
        zip(token_ids, tokens, values, alternatives, strict=True)
    ):
        if others is not None and not isinstance(others, dict):
            raise ValueError(f"malformed top_logprobs at position {position}")
        entries = {token: value, **(others or {})}
        key = f"token_id:{token_id}"
        if key not in entries:
            raise ValueError(f"no logprob for sampled token {token_id} at position {position}")
        sampled.append(_logprob_value(entries[key], position))
    return sampled


def _is_token_id_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)


def _logprob_value(value: Any, position: int) -> float:
    """One position's logprob as a float: null and NaN become NaN; anything but a number is malformed."""
    if value is None:
        return math.nan
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ValueError(f"logprob {value!r} at position {position} is not a number")
    return float(value)
