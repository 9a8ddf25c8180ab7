"""The task of `benchmarks/minority_routes.py`: three routes to a total, of which the held-out prompts allow one.

A prompt ``"abcd:"`` (four digits, ``b``, ``c`` and ``d`` pairwise different) asks for a running total of its digits
in which exactly one of ``b``, ``c``, ``d`` is subtracted. That makes three routes, the answer modes of the task:
``R1 = a+b+c-d``, ``R2 = a+b-c+d``, ``R3 = a-b+c+d``. A route's chain writes every running total on two digits
(`chain`), then its total on a last line of its own: for ``"5310:"``, route R2 is ``"5+3=08-1=07+0=07\\n07"``
(nineteen characters, twenty tokens with the EOS token under a one-character-one-token tokenizer). The route is chosen
at the three operator tokens (`OPERATOR_POSITIONS`); the rest is an exact derivation. A route is valid only if every
running total is at least 0 (`valid_routes`); `grade` marks a completion correct (reward 1.0) only when it is exactly
the chain of a valid route followed by its total. Nothing rewards diversity itself.

Of the 7200 prompts, the 3060 on which all three routes are valid are trained on (`training_prompts`; 24 of them form
the probe set, `probe_prompts`, where every route is correct and the routes a model keeps can be counted). The held-out
prompts (`heldout_prompts`) are 24 per route among those on which exactly that one route is valid, drawn once with a
fixed seed, so that whether a sample succeeds depends on the route it takes.

The supervised corpus of the base model (`sample_corpus`) covers every prompt but the held-out ones
(`corpus_prompts`), each with the same route preference, majority 0.85 / minority 0.14 / rarest 0.01
(`ROUTE_SHARES`), the roles of R1 to R3 rotating with the seed (`route_roles`), plus a share of wrong examples: half a
slip in one running total (off by one to three, the chain continued from it), half the right chain followed by a
wrong total. On a prompt where a route is invalid its chain writes the negative total (``"0-1=-1+9=08+7=15"``): exact
arithmetic, which no reward accepts. So the base model learns the arithmetic of the whole prompt space, held-out
regions included, and a route preference that does not depend on the prompt: it does not know which routes are
valid, and a held-out prompt that needs its rarest route is one it rarely solves.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import NamedTuple

__all__ = [
    "COMPLETION_CHARACTERS",
    "HELDOUT_PER_ROUTE",
    "OPERATOR_POSITIONS",
    "PROBE_SIZE",
    "PROMPTS",
    "ROLES",
    "ROUTES",
    "ROUTE_SHARES",
    "Grade",
    "chain",
    "completion",
    "corpus_prompts",
    "grade",
    "heldout_prompts",
    "heldout_route",
    "is_correct",
    "probe_prompts",
    "route_of",
    "route_roles",
    "running_totals",
    "sample_corpus",
    "training_prompts",
    "valid_routes",
]

#: The routes and the signs of ``b``, ``c`` and ``d`` on each.
ROUTES: Mapping[str, str] = {"R1": "++-", "R2": "+-+", "R3": "-++"}

#: The roles a route takes in the base model's corpus, from the most to the least frequent.
ROLES = ("majority", "minority", "rarest")

#: The share of the correct corpus examples that takes the route of each role.
ROUTE_SHARES: Mapping[str, float] = {"majority": 0.85, "minority": 0.14, "rarest": 0.01}

#: Every prompt of the task, ``"abcd:"`` for the digit quadruples whose last three digits are pairwise different.
PROMPTS = tuple(
    f"{a}{b}{c}{d}:" for a in range(10) for b in range(10) for c in range(10) for d in range(10) if len({b, c, d}) == 3
)

#: Characters of a completion: the chain's sixteen, the newline and the total's two (EOS not counted).
COMPLETION_CHARACTERS = 19

#: Where the chain writes its operators (0-based): ``"5+3=08-1=07+0=07"`` has them at 1, 6 and 11.
OPERATOR_POSITIONS = (1, 6, 11)

#: Held-out prompts per route, and the probe set's size.
HELDOUT_PER_ROUTE = 24
PROBE_SIZE = 24

#: The seed that draws the held-out prompts and the probe set.
_SPLIT_SEED = 0

_PROMPT_SET = frozenset(PROMPTS)

#: The lowest total written on two characters (``"-9"``); every running total of every route is at least -9.
_MIN_TOTAL = -9


def _digits(prompt: str) -> tuple[int, int, int, int]:
    if prompt not in _PROMPT_SET:
        raise ValueError(f"expected four digits, the last three pairwise different, and ':', got {prompt!r}")
    return int(prompt[0]), int(prompt[1]), int(prompt[2]), int(prompt[3])


def running_totals(prompt: str, route: str) -> tuple[int, int, int]:
    """The three running totals of ``route`` on ``prompt``: ``(a±b, a±b±c, a±b±c±d)``.

    Raises:
        ValueError: for a prompt not in `PROMPTS` or a route not in `ROUTES`.
    """
    if route not in ROUTES:
        raise ValueError(f"unknown route {route!r}: expected one of {', '.join(ROUTES)}")
    a, *rest = _digits(prompt)
    totals, total = [], a
    for sign, digit in zip(ROUTES[route], rest, strict=True):
        total += digit if sign == "+" else -digit
        totals.append(total)
    return totals[0], totals[1], totals[2]


def valid_routes(prompt: str) -> tuple[str, ...]:
    """The routes of ``prompt`` whose every running total is at least 0, in the order of `ROUTES`."""
    return tuple(route for route in ROUTES if min(running_totals(prompt, route)) >= 0)


def chain(prompt: str, route: str) -> str:
    """The first line of ``route``'s completion: ``"5+3=08-1=07+0=07"`` for R2 on ``"5310:"`` (a negative total on
    two characters, ``"-1"``: the chain of an invalid route, which no reward accepts)."""
    totals = running_totals(prompt, route)
    text = prompt[0]
    for sign, digit, total in zip(ROUTES[route], prompt[1:4], totals, strict=True):
        text += f"{sign}{digit}={total:02d}"
    return text


def completion(prompt: str, route: str) -> str:
    """``route``'s chain, a newline and its total: the one completion of that route that `grade` accepts (when the
    route is valid)."""
    return f"{chain(prompt, route)}\n{running_totals(prompt, route)[2]:02d}"


def route_of(text: str) -> str | None:
    """The route a completion takes, read off its operators at `OPERATOR_POSITIONS`; None when they spell no route
    (too short, or not exactly one minus)."""
    if len(text) <= OPERATOR_POSITIONS[-1]:
        return None
    signs = "".join(text[i] for i in OPERATOR_POSITIONS)
    return next((route for route, route_signs in ROUTES.items() if route_signs == signs), None)


class Grade(NamedTuple):
    """The verdict on one completion: the route it takes (None: no route), whether it is that route's completion
    character for character (``exact``), and whether it is correct (exact on a valid route)."""

    route: str | None
    exact: bool
    correct: bool


def grade(prompt: str, text: str) -> Grade:
    """Grade the completion ``text`` of ``prompt``; nothing is stripped, since every character is a token the model
    had to get right."""
    route = route_of(text)
    exact = route is not None and text == completion(prompt, route)
    return Grade(route, exact, exact and route in valid_routes(prompt))


def is_correct(prompt: str, text: str) -> bool:
    """Whether ``text`` is a correct completion of ``prompt`` (see `grade`)."""
    return grade(prompt, text).correct


def route_roles(seed: int) -> dict[str, str]:
    """The route of each role of `ROLES` in the corpus of ``seed``: the roles rotate over R1, R2, R3 with the seed
    (seed 0: R1 majority, R2 minority, R3 rarest; seed 1: R2, R3, R1; seed 2: R3, R1, R2; then again)."""
    routes = list(ROUTES)
    return {role: routes[(seed + i) % len(routes)] for i, role in enumerate(ROLES)}


def _split() -> tuple[tuple[str, ...], dict[str, tuple[str, ...]], tuple[str, ...]]:
    rng = random.Random(_SPLIT_SEED)
    training = tuple(p for p in PROMPTS if len(valid_routes(p)) == len(ROUTES))
    heldout = {}
    for route in ROUTES:
        only = [p for p in PROMPTS if valid_routes(p) == (route,)]
        heldout[route] = tuple(sorted(rng.sample(only, HELDOUT_PER_ROUTE)))
    probe = tuple(sorted(rng.sample(training, PROBE_SIZE)))
    return training, heldout, probe


_TRAINING, _HELDOUT, _PROBE = _split()
_HELDOUT_ROUTE = {prompt: route for route, prompts in _HELDOUT.items() for prompt in prompts}


def training_prompts() -> tuple[str, ...]:
    """The 3060 prompts on which all three routes are valid, in increasing order: the base model's corpus and the RL
    runs' prompts."""
    return _TRAINING


def heldout_prompts() -> tuple[str, ...]:
    """The 72 held-out prompts, 24 per route on which only that route is valid, route by route (R1's first), each
    route's in increasing order."""
    return tuple(prompt for route in ROUTES for prompt in _HELDOUT[route])


def heldout_route(prompt: str) -> str:
    """The one valid route of a held-out prompt.

    Raises:
        KeyError: for a prompt not held out.
    """
    return _HELDOUT_ROUTE[prompt]


def probe_prompts() -> tuple[str, ...]:
    """The 24 training prompts of the probe set (every route valid), in increasing order."""
    return _PROBE


def corpus_prompts() -> tuple[str, ...]:
    """The prompts of the base model's corpus: every prompt of `PROMPTS` but the held-out ones, in increasing order
    (7128)."""
    return tuple(p for p in PROMPTS if p not in _HELDOUT_ROUTE)


def _wrong_example(prompt: str, route: str, rng: random.Random) -> str:
    """A wrong completion of ``route``: a slip in one running total (off by one to three, the chain continued from
    it), or the right chain followed by a wrong total; every total still on two characters (-9 to 99)."""
    totals = list(running_totals(prompt, route))
    signs, digits = ROUTES[route], prompt[1:4]
    if rng.random() < 0.5:
        step = rng.randrange(3)
        shift = rng.choice([d for d in (-3, -2, -1, 1, 2, 3) if min(totals[step:]) + d >= _MIN_TOTAL])
        totals = [t + shift if i >= step else t for i, t in enumerate(totals)]
        body = "".join(f"{s}{d}={t:02d}" for s, d, t in zip(signs, digits, totals, strict=True))
        return f"{prompt[0]}{body}\n{totals[2]:02d}"
    wrong = [t for t in range(totals[2] - 3, totals[2] + 4) if t != totals[2] and t >= _MIN_TOTAL]
    return f"{chain(prompt, route)}\n{rng.choice(wrong):02d}"


def sample_corpus(prompts: Sequence[str], per_prompt: int, wrong_fraction: float, seed: int) -> list[tuple[str, str]]:
    """``per_prompt`` (prompt, completion) pairs per prompt, the base model's supervised corpus.

    Args:
        prompts: the prompts of the corpus (`corpus_prompts`); a route that is invalid on a prompt writes its negative
            totals.
        per_prompt: examples per prompt.
        wrong_fraction: the probability that an example is wrong (`_wrong_example`: half a slip in a running total,
            half a wrong total after the right chain; its route drawn like a correct one's).
        seed: the seed of the draws, which also fixes the roles of the routes (`route_roles`).

    Returns:
        The pairs, prompt by prompt; a correct example takes the route of each role with its share of
        `ROUTE_SHARES`, the same on every prompt.

    Raises:
        ValueError: when ``wrong_fraction`` is not in [0, 1).
    """
    if not 0 <= wrong_fraction < 1:
        raise ValueError(f"wrong_fraction={wrong_fraction} is invalid: expected a number in [0, 1)")
    roles = route_roles(seed)
    routes = [roles[role] for role in ROLES]
    weights = [ROUTE_SHARES[role] for role in ROLES]
    rng = random.Random(seed)
    corpus: list[tuple[str, str]] = []
    for prompt in prompts:
        for _ in range(per_prompt):
            route = rng.choices(routes, weights)[0]
            wrong = rng.random() < wrong_fraction
            corpus.append((prompt, _wrong_example(prompt, route, rng) if wrong else completion(prompt, route)))
    return corpus
