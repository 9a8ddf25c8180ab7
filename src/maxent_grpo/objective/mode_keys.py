"""Mode keys: map a completion to the answer it gives, so the listwise entropy acts on distinct answers.

A mode key is a callable ``(text, completion_ids) -> Hashable | None``. Candidates of one prompt group with equal
keys form one mode; ``None`` means "no answer", and each such candidate forms its own singleton mode.

Canonical form. A mode key must see the answer the way the rewards do, or the entropy term spreads weight over
spellings of one answer (a completion that starts with ``<bos>`` or a space would be a "new" correct answer, and the
policy would learn to emit such prefixes). The trainer therefore calls every key through [`answer_keys`], which
passes ``text`` = the completion decoded with special tokens skipped (what reward functions receive) and
``completion_ids`` = the token ids of that text with its leading whitespace stripped, encoded again without special
tokens (so ``" Paris"``, ``"Paris"`` and ``"<bos>Paris"`` give the same ids, whatever the tokenizer). The
``maxent/mode_coverage`` metric uses the same keys. A custom key should canonicalise the answer as its reward does:
read ``text`` (or the ids given), strip what the reward ignores (surrounding whitespace, formatting such as ``$`` or
a trailing period, case if the reward is case-insensitive) and return equal values for answers the reward treats as
equal.

Built-in keys (see [`BUILTIN_MODE_KEYS`]):

- ``"first_token"``: the first token id of the answer (``completion_ids[0]`` of the canonical ids above) when
  ``completion_ids`` is given and non-empty, otherwise the first non-whitespace character of the text. With the
  character-level tokenizer of the embedded demo it is the answer's first character; with a subword tokenizer the
  first token may cover only part of a word, so it identifies the answer only when the answer is a single token.
- ``"last_line"``: the last non-empty line, stripped.
- ``"boxed"``: the stripped content of the last ``\\boxed{...}`` whose braces balance (the final-answer
  convention of math data sets); ``None`` when there is none or it is empty.
- ``"final_answer"``: the final answer of a free-form completion, as a real model writes it:

  - the content of the last ``\\boxed{...}`` if there is one;
  - else the number last stated as a result, after ``"answer is"``, ``":"`` or ``"="`` (``"A prime below 50: 17"``
    gives ``"17"``);
  - else the first number of the last line that holds one (``"17 is a prime below 50."`` gives ``"17"``, not the
    ``50`` the question named);
  - else the last non-empty line with case, surrounding markup and punctuation and a leading ``"the answer is"`` /
    ``"answer:"`` removed (``"Paris."`` and ``"The answer is paris"`` are one mode).

  Numbers are normalized: ``"12"``, ``"12."``, ``"The answer is 12"`` and ``"7 + 5 = **12**"`` are one mode,
  ``"12"``; thousands separators, leading zeros and trailing decimal zeros are dropped (``"1,200.50"`` is
  ``"1200.5"``, ``"07"`` is ``"7"``).
  Use it where a model answers in its own words (chat models); ``first_token`` merges ``"12"`` and ``"13"`` when a
  tokenizer writes one token per digit, and ``last_line`` separates ``"12"`` from ``"12."``.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Hashable, Sequence

import torch
from transformers import PreTrainedTokenizerBase

from maxent_grpo.dotted_path import import_callable

__all__ = [
    "BUILTIN_MODE_KEYS",
    "ModeKey",
    "answer_keys",
    "assign_mode_ids",
    "boxed",
    "final_answer",
    "first_token",
    "last_line",
    "mode_coverage",
    "resolve_mode_key",
]

ModeKey = Callable[[str, Sequence[int] | None], Hashable | None]
"""The signature of a mode key, ``(completion text, completion token ids or None) -> answer``, None for no answer."""

_BOXED = "\\boxed{"
# A number: optional sign, digits with optional thousands separators, an optional decimal part or fraction.
_NUMBER = re.compile(r"(?<![\w.])[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+|/\d+)?")
# A number stated as a result: after "answer is", ":" or "=", markup between.
_STATED = re.compile(rf"(?:answer\s+is|[=:])[\s*_$]*({_NUMBER.pattern})", re.IGNORECASE)
_ANSWER_PREFIX = re.compile(r"^(?:so,?\s+)?(?:the\s+)?(?:final\s+)?answer(?:\s+is)?\s*[:=]?\s*", re.IGNORECASE)
_MARKUP = " \t*_`$\"'.,;:!?()[]{}"


def first_token(text: str, completion_ids: Sequence[int] | None = None) -> Hashable | None:
    """First completion token id if ``completion_ids`` is non-empty, else the first non-whitespace character."""
    if completion_ids is not None and len(completion_ids) > 0:
        return int(completion_ids[0])
    stripped = text.lstrip()
    return stripped[0] if stripped else None


def last_line(text: str, completion_ids: Sequence[int] | None = None) -> Hashable | None:
    """Last non-empty line of the text, stripped; None if the text has no non-blank line."""
    for line in reversed(text.splitlines()):
        if line.strip():
            return line.strip()
    return None


def boxed(text: str, completion_ids: Sequence[int] | None = None) -> Hashable | None:
    """Stripped content of the last ``\\boxed{...}`` with balanced braces; None when absent or empty."""
    start = text.rfind(_BOXED)
    while start != -1:
        begin = start + len(_BOXED)
        depth = 1
        for index in range(begin, len(text)):
            depth += {"{": 1, "}": -1}.get(text[index], 0)
            if depth == 0:
                return text[begin:index].strip() or None
        # Unbalanced (for example a truncated completion): fall back to an earlier complete box.
        start = text.rfind(_BOXED, 0, start)
    return None


def _normal_number(number: str) -> str:
    number = number.replace(",", "").replace("−", "-").lstrip("+")
    sign, number = ("-", number[1:]) if number.startswith("-") else ("", number)
    if "." in number:
        number = number.rstrip("0").rstrip(".")
    number = number.lstrip("0")
    if not number or number.startswith((".", "/")):
        number = "0" + number
    return "0" if number == "0" else sign + number


def final_answer(text: str, completion_ids: Sequence[int] | None = None) -> Hashable | None:
    """The final answer of a free-form completion: the last ``\\boxed{}``, else the last number, else the last
    non-empty line, normalized (see the module docstring); None when the text holds none of them."""
    answer = boxed(text)
    if answer is not None:
        numbers = _NUMBER.findall(answer)
        return _normal_number(numbers[0]) if len(numbers) == 1 and numbers[0] == answer.strip() else answer
    stated = _STATED.findall(text)
    if stated:
        return _normal_number(stated[-1])
    for line in reversed(text.splitlines()):
        numbers = _NUMBER.findall(line)
        if numbers:
            return _normal_number(numbers[0])
    line = last_line(text)
    if line is None:
        return None
    line = _ANSWER_PREFIX.sub("", line.strip(_MARKUP)).strip(_MARKUP)
    return " ".join(line.casefold().split()) or None


BUILTIN_MODE_KEYS: dict[str, ModeKey] = {
    "first_token": first_token,
    "last_line": last_line,
    "boxed": boxed,
    "final_answer": final_answer,
}
"""Built-in mode keys by name."""


def _accepts_ids(fn: Callable[..., object]) -> bool:
    """Whether ``fn`` can be called as ``fn(text, completion_ids)``; else it must accept ``fn(text)``."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # some C callables expose no signature: call them with the text only
        return False
    try:
        signature.bind("", None)
    except TypeError:
        try:
            signature.bind("")
        except TypeError as error:
            raise ValueError(
                f"mode key {fn!r} must accept (text) or (text, completion_ids); its signature is {signature}"
            ) from error
        return False
    return True


def _as_mode_key(fn: Callable[..., object]) -> ModeKey:
    """Wrap a user callable as a two-argument mode key whose results are checked to be hashable."""
    takes_ids = _accepts_ids(fn)

    def mode_key(text: str, completion_ids: Sequence[int] | None = None) -> Hashable | None:
        key = fn(text, completion_ids) if takes_ids else fn(text)
        if not isinstance(key, Hashable):
            raise TypeError(f"mode key {fn!r} returned an unhashable {type(key).__name__}: {key!r}")
        return key

    mode_key.__name__ = getattr(fn, "__name__", "mode_key")
    mode_key.__doc__ = getattr(fn, "__doc__", None)
    return mode_key


def resolve_mode_key(spec: str | Callable[..., object] | None) -> ModeKey | None:
    """Turn a mode key spec into a ``(text, completion_ids) -> Hashable | None`` callable.

    Args:
        spec: None (no mode key: candidate-level entropy); a built-in name from [`BUILTIN_MODE_KEYS`]; a dotted
            path ``"package.module:function"`` or ``"package.module.function"`` to a callable; or a callable.
            A user callable may take ``(text)`` or ``(text, completion_ids)``.

    Raises:
        ValueError: unknown name, a path that cannot be imported or does not resolve to a callable, or a callable
            that accepts neither form.
    """
    if spec is None:
        return None
    if isinstance(spec, str):
        if spec in BUILTIN_MODE_KEYS:
            return BUILTIN_MODE_KEYS[spec]
        if "." not in spec and ":" not in spec:
            raise ValueError(
                f"unknown mode key {spec!r}: expected one of {sorted(BUILTIN_MODE_KEYS)} "
                "or a dotted path 'package.module:function'"
            )
        return _as_mode_key(import_callable(spec, "mode key"))
    if callable(spec):
        return _as_mode_key(spec)
    raise ValueError(f"mode key must be None, a string or a callable, got a {type(spec).__name__}: {spec!r}")


def answer_keys(mode_key: ModeKey, texts: Sequence[str], tokenizer: PreTrainedTokenizerBase) -> list[Hashable | None]:
    """The mode key of each completion, computed on its canonical answer (see the module docstring).

    Args:
        mode_key: the key to apply.
        texts: decoded completions, special tokens skipped (what reward functions receive).
        tokenizer: the tokenizer that encodes each answer text (leading whitespace stripped, no special tokens) into
            the ``completion_ids`` the key receives.

    The generated ids are not used: they may hold special tokens (``<bos>``, ``<pad>``) the rewards never see, and a
    subword tokenizer gives ``" Paris"`` and ``"Paris"`` different ids.
    """
    if not texts:
        return []
    answers = [text.lstrip() for text in texts]
    encoded = tokenizer(answers, add_special_tokens=False)["input_ids"]
    return [mode_key(text, ids) for text, ids in zip(texts, encoded, strict=True)]


def assign_mode_ids(keys: Sequence[Sequence[Hashable | None]]) -> torch.Tensor:
    """``[num_groups, G]`` long tensor of mode ids: per group, distinct keys get ``0 .. M-1`` in first-seen order.

    Each ``None`` key gets an id of its own. All groups must have the same size G.
    """
    sizes = {len(group) for group in keys}
    if len(sizes) > 1:
        raise ValueError(f"keys must hold groups of equal size, got sizes {sorted(sizes)}")
    ids: list[list[int]] = []
    for group in keys:
        seen: dict[Hashable, int] = {}
        group_ids = []
        next_id = 0
        for key in group:
            if key is None:
                group_ids.append(next_id)
                next_id += 1
            else:
                if key not in seen:
                    seen[key] = next_id
                    next_id += 1
                group_ids.append(seen[key])
        ids.append(group_ids)
    return torch.tensor(ids, dtype=torch.long).reshape(len(keys), sizes.pop() if sizes else 0)


def mode_coverage(
    keys: Sequence[Sequence[Hashable | None]],
    rewards: torch.Tensor | Sequence[Sequence[float]],
    threshold: float,
) -> float:
    """Mean over groups of the number of distinct modes among candidates with ``reward >= threshold``.

    This is the "distinct correct modes per group" metric. ``None`` keys count as one mode each; NaN rewards never
    pass the threshold. Returns 0.0 when there are no groups.
    """
    reward_rows = rewards.tolist() if isinstance(rewards, torch.Tensor) else [list(row) for row in rewards]
    if [len(group) for group in keys] != [len(row) for row in reward_rows]:
        raise ValueError("keys and rewards must have the same [num_groups, G] shape")
    if not keys:
        return 0.0
    total = 0
    for group, row in zip(keys, reward_rows, strict=True):
        passing = [key for key, reward in zip(group, row, strict=True) if reward >= threshold]
        total += len({key for key in passing if key is not None}) + sum(key is None for key in passing)
    return total / len(keys)
