"""A generation backend whose completions name their own prompt, with fault injection, for alignment probes.

For prompt ``"p3:"`` every completion's text is ``"p3|<n>"`` (n a per-backend counter), so a reward function can check
that each row's completion belongs to that row's prompt and dataset answer. Faults are drawn from a seeded RNG:
failing slots (omitted, or returned with ``failed=True``), short groups, out-of-vocabulary ids and raised errors.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from transformers import PreTrainedTokenizerBase

from maxent_grpo import Completion


def prompt_tag(prompt: str) -> str:
    return prompt.rstrip(":")


def assert_row_aligned(prompt: str, completion: str, answer_tag: str) -> None:
    """Fail loudly unless the completion's tag names this row's prompt and its dataset answer column."""
    tag = completion.split("|")[0]
    if tag != prompt_tag(prompt) or tag != answer_tag:
        raise AssertionError(f"misaligned row: prompt={prompt!r} answer={answer_tag!r} completion={completion!r}")


@dataclass
class TaggedBackend:
    tokenizer: PreTrainedTokenizerBase
    slot_failure_rate: float = 0.0
    short_group_rate: float = 0.0
    oov_rate: float = 0.0
    raise_rate: float = 0.0
    always_fail: bool = False
    empty_positions: frozenset[int] = frozenset()  # request positions whose group always comes back empty
    empty_prompts: frozenset[str] = frozenset()  # prompts whose group always comes back empty
    empty_calls: frozenset[int] = frozenset()  # calls (0, 1, ...) in which every group comes back empty
    seed: int = 0
    calls: list[list[int]] = field(default_factory=list)
    _counter: int = 0

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def _completion(self, prompt: str) -> Completion:
        self._counter += 1
        text = f"{prompt_tag(prompt)}|{self._counter % 10}"
        ids = [*self.tokenizer(text)["input_ids"], self.tokenizer.eos_token_id]
        prompt_ids = self.tokenizer(prompt)["input_ids"]
        if self._rng.random() < self.oov_rate:
            return Completion(text=text, prompt_ids=prompt_ids, completion_ids=[*ids[:-1], len(self.tokenizer) + 5])
        if self._rng.random() < self.slot_failure_rate / 2:
            return Completion(text=text, prompt_ids=prompt_ids, completion_ids=ids, failed=True)
        return Completion(text=text, prompt_ids=prompt_ids, completion_ids=ids, logprobs=[-1.0] * len(ids))

    def generate(self, prompts: Sequence[str], counts: Sequence[int]) -> list[list[Completion]]:
        call = len(self.calls)
        self.calls.append(list(counts))
        if self.always_fail:
            raise ConnectionError("backend is down")
        if self._rng.random() < self.raise_rate:
            raise TimeoutError("injected backend timeout")
        groups = []
        for position, (prompt, count) in enumerate(zip(prompts, counts, strict=True)):
            if position in self.empty_positions or prompt in self.empty_prompts or call in self.empty_calls:
                groups.append([])
                continue
            if count > 1 and self._rng.random() < self.short_group_rate:
                count = self._rng.randrange(count)
            group = []
            for _ in range(count):
                if self._rng.random() < self.slot_failure_rate / 2:
                    continue  # the slot is simply missing
                group.append(self._completion(prompt))
            groups.append(group)
        return groups


def rank_one_drops(tokenizer: PreTrainedTokenizerBase, rank: int) -> TaggedBackend:
    """The two-process probes' backend: process 1 gets its first two groups back empty, process 0 none."""
    return TaggedBackend(tokenizer, empty_positions=frozenset({0, 1}) if rank == 1 else frozenset(), seed=rank)
