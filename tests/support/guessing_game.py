"""A guessing-game environment whose tool raises on some guesses and hangs on others, a user backend that plays it
from a script, and a reward that fails on a misaligned row: the pieces of the tool-calling fault tests.

Each dataset row ``{"prompt": "find <i>", "secret": <i % 10>}`` gets a fresh `FlakyGuessGame` per episode. Its
``guess`` tool raises on 7 and sleeps `HANG_SECONDS` on 5; on any other number it answers "higher", "lower" or
"correct". `ScriptedGuesser` is a `GenerationBackend` over `TokenPrompt` ids: a first turn guesses the next number
of its script, any later turn answers "done".
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from datasets import Dataset

from maxent_grpo import Completion, TokenPrompt
from maxent_grpo.tiny_model import build_tiny_tool_tokenizer

CALL = '<tool_call>\n{"name": "guess", "arguments": {"n": '
END = "}}\n</tool_call>"
#: A whole call, guess 3, as one token in the tests that let a real engine sample it.
GUESS_THREE = CALL + "3" + END
RAISES, HANGS = 7, 5
HANG_SECONDS = 30.0


def game_tokenizer():
    """The tiny tool tokenizer with a guess call's opening and closing as one token each."""
    return build_tiny_tool_tokenizer([CALL, END])


def game_dataset(num_prompts: int = 8) -> Dataset:
    return Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": f"find {i}"}] for i in range(num_prompts)],
            "secret": [i % 10 for i in range(num_prompts)],
        }
    )


class FlakyGuessGame:
    """Guess the secret digit; ``guess`` raises on 7 and hangs on 5."""

    def __init__(self) -> None:
        self.secret: int | None = None
        self.solved = False
        self.guesses: list[int] = []

    def reset(self, secret: int, **kwargs) -> str:
        self.secret, self.solved, self.guesses = int(secret), False, []
        return f" (secret {secret})"

    def guess(self, n: int) -> str:
        """Guess the secret digit.

        Args:
            n: the guess, 0 to 9.
        """
        self.guesses.append(n)
        if n == RAISES:
            raise RuntimeError("seven is out of order")
        if n == HANGS:
            time.sleep(HANG_SECONDS)
        if n == self.secret:
            self.solved = True
            return "correct"
        return "higher" if n < self.secret else "lower"

    def get_reward(self) -> float:
        return 1.0 if self.solved else 0.0


def aligned_game_reward(prompts, completions, environments, secret, **kwargs) -> list[float]:
    """Fails on a row whose prompt, environment and dataset column disagree; else 1 per guess the episode made."""
    for prompt, environment, row_secret in zip(prompts, environments, secret, strict=True):
        content = prompt[-1]["content"]
        expected = f"(secret {row_secret})"
        if environment.secret != row_secret or not content.endswith(expected):
            raise AssertionError(f"misaligned row: {content!r}, environment secret {environment.secret}, {row_secret}")
    return [float(sum(message["role"] == "tool" for message in completion)) for completion in completions]


@dataclass
class ScriptedGuesser:
    """Plays the game from a script of first guesses; records each call's number of prompts (for symmetry checks)."""

    tokenizer: object
    script: Sequence[int] = (3, 5, 7, 2, 9, 5, 1, 4)
    calls: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._guesses = itertools.cycle(self.script)

    def _reply(self, prompt: TokenPrompt) -> str:
        if "<tool_response>" in self.tokenizer.decode(list(prompt.ids)):
            return "done<|im_end|>"
        return f"{CALL}{next(self._guesses)}{END}<|im_end|>"

    def generate(self, prompts: Sequence[TokenPrompt], counts: Sequence[int]) -> list[list[Completion]]:
        self.calls.append(len(prompts))
        groups = []
        for prompt, count in zip(prompts, counts, strict=True):
            group = []
            for _ in range(count):
                text = self._reply(prompt)
                ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
                group.append(Completion(text=text, prompt_ids=list(prompt.ids), completion_ids=ids))
            groups.append(group)
        return groups
