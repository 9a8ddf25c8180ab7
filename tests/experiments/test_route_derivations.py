"""The task of the minority-routes benchmark: routes, validity, the exact-chain grader, the split and the corpus."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from maxent_grpo.tiny_model import build_tiny_tokenizer
from maxent_grpo_experiments.route_derivations import (
    COMPLETION_CHARACTERS,
    HELDOUT_PER_ROUTE,
    OPERATOR_POSITIONS,
    PROBE_SIZE,
    PROMPTS,
    ROLES,
    ROUTE_SHARES,
    ROUTES,
    chain,
    completion,
    corpus_prompts,
    grade,
    heldout_prompts,
    heldout_route,
    is_correct,
    probe_prompts,
    route_of,
    route_roles,
    running_totals,
    sample_corpus,
    training_prompts,
    valid_routes,
)

PROPERTY_SETTINGS = settings(max_examples=100, deadline=None)
prompts = st.sampled_from(PROMPTS)
routes = st.sampled_from(list(ROUTES))
#: Texts over the completion's characters, near-misses included (a character off, one missing, one too many).
texts = st.text(alphabet="0123456789+-=\n", max_size=COMPLETION_CHARACTERS + 2)


def test_chains_routes_and_grades_of_examples() -> None:
    assert running_totals("5310:", "R2") == (8, 7, 7)
    assert completion("5310:", "R2") == "5+3=08-1=07+0=07\n07"
    assert completion("5310:", "R1") == "5+3=08+1=09-0=09\n09"
    assert completion("5310:", "R3") == "5-3=02+1=03+0=03\n03"
    assert valid_routes("5310:") == ("R1", "R2", "R3")
    # "0197:": 0-1 < 0 (R3), 0+1-9 < 0 (R2); only R1 is valid, and its chain is accepted alone.
    assert valid_routes("0197:") == ("R1",) and chain("0197:", "R3") == "0-1=-1+9=08+7=15"
    assert grade("0197:", completion("0197:", "R1")) == ("R1", True, True)
    assert grade("0197:", completion("0197:", "R3")) == ("R3", True, False)  # exact, but on an invalid route
    assert grade("5310:", "5+3=08-1=07+0=07\n08") == ("R2", False, False)  # a wrong total
    assert grade("5310:", "5+3=08-1=07+0=07\n07\n") == ("R2", False, False)  # nothing is stripped
    assert grade("5310:", "5+3=08+1=09+0=09\n09") == (None, False, False)  # no minus: no route
    assert route_of("5+3=08-1") is None and route_of("5-3=02+1=03+") == "R3"
    assert not is_correct("5310:", "5+3=08-1=07+0=07")
    for bad in ("5311:", "531:", "5310=", "53a0:"):
        with pytest.raises(ValueError, match="four digits"):
            valid_routes(bad)
    with pytest.raises(ValueError, match="unknown route"):
        chain("5310:", "R4")


def test_every_completion_is_twenty_tokens_with_eos_and_its_operators_where_the_route_is_read() -> None:
    tokenizer = build_tiny_tokenizer("0123456789+-=:\n")
    for prompt in ("5310:", "0197:", "9870:", "0025:"):
        for route in ROUTES:
            text = completion(prompt, route)
            ids = tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]
            assert len(text) == COMPLETION_CHARACTERS and len(ids) == 20
            assert "".join(text[i] for i in OPERATOR_POSITIONS) == ROUTES[route]
        assert len(tokenizer(prompt)["input_ids"]) == 5


@PROPERTY_SETTINGS
@given(prompts, routes)
def test_a_route_is_valid_exactly_when_no_running_total_is_negative(prompt: str, route: str) -> None:
    a, b, c, d = (int(x) for x in prompt[:4])
    signs = [1 if s == "+" else -1 for s in ROUTES[route]]
    totals = (a + signs[0] * b, a + signs[0] * b + signs[1] * c, a + signs[0] * b + signs[1] * c + signs[2] * d)
    assert running_totals(prompt, route) == totals
    assert (route in valid_routes(prompt)) == (min(totals) >= 0)
    assert sorted(ROUTES[route]) == ["+", "+", "-"]  # exactly one of b, c, d is subtracted
    assert route_of(completion(prompt, route)) == route


@PROPERTY_SETTINGS
@given(prompts, texts)
def test_the_reward_is_one_only_for_the_exact_chain_of_a_valid_route_and_its_total(prompt: str, text: str) -> None:
    verdict = grade(prompt, text)
    assert verdict.correct == (text in {completion(prompt, r) for r in valid_routes(prompt)})
    assert verdict.exact == (verdict.route is not None and text == completion(prompt, verdict.route))


@PROPERTY_SETTINGS
@given(prompts, routes, st.integers(0, COMPLETION_CHARACTERS - 1), st.sampled_from("0123456789+-=\n"))
def test_one_character_off_the_chain_is_never_rewarded(prompt: str, route: str, at: int, character: str) -> None:
    text = completion(prompt, route)
    changed = text[:at] + character + text[at + 1 :]
    assert is_correct(prompt, changed) == (changed == text and route in valid_routes(prompt))
    assert not is_correct(prompt, text[:-1]) and not is_correct(prompt, text + "0")


def test_the_split_trains_on_prompts_where_every_route_is_valid_and_holds_out_one_valid_route() -> None:
    training, heldout, probe = training_prompts(), heldout_prompts(), probe_prompts()
    assert (len(PROMPTS), len(training), len(heldout), len(probe)) == (7200, 3060, 72, PROBE_SIZE)
    assert set(corpus_prompts()) == set(PROMPTS) - set(heldout) and set(training) <= set(corpus_prompts())
    assert all(valid_routes(p) == tuple(ROUTES) for p in training)
    assert set(probe) <= set(training) and set(heldout).isdisjoint(training)
    assert Counter(heldout_route(p) for p in heldout) == dict.fromkeys(ROUTES, HELDOUT_PER_ROUTE)
    assert all(valid_routes(p) == (heldout_route(p),) for p in heldout)
    assert [heldout_route(p) for p in heldout] == sorted(heldout_route(p) for p in heldout)  # route by route
    with pytest.raises(KeyError):
        heldout_route(training[0])


@given(st.integers(0, 10**6))
def test_the_roles_rotate_over_the_routes_with_the_seed(seed: int) -> None:
    roles = route_roles(seed)
    assert list(roles) == list(ROLES) and sorted(roles.values()) == sorted(ROUTES)
    assert route_roles(seed + 3) == roles and route_roles(seed + 1)["rarest"] == roles["majority"]
    assert [route_roles(s)["majority"] for s in range(3)] == ["R1", "R2", "R3"]


@PROPERTY_SETTINGS
@given(
    st.lists(st.sampled_from(PROMPTS), min_size=1, max_size=3, unique=True),
    st.integers(1, 20),
    st.floats(0.0, 0.9),
    st.integers(0, 2**16),
)
def test_every_corpus_example_is_a_route_exact_or_a_slip_that_stays_consistent(
    chosen: list[str], per_prompt: int, wrong_fraction: float, seed: int
) -> None:
    corpus = sample_corpus(chosen, per_prompt, wrong_fraction, seed)
    assert [p for p, _ in corpus] == [p for p in chosen for _ in range(per_prompt)]
    for prompt, text in corpus:
        verdict = grade(prompt, text)
        assert len(text) == COMPLETION_CHARACTERS and verdict.route is not None  # every total on two characters
        if not verdict.exact:  # a slip carried through the chain, or a wrong total after the right chain
            first, total = text.split("\n")
            written = [int(first[i + 3 : i + 5]) for i in OPERATOR_POSITIONS]
            right = running_totals(prompt, verdict.route)
            off = [w - r for w, r in zip(written, right, strict=True)]
            if first == chain(prompt, verdict.route):
                assert 1 <= abs(int(total) - right[2]) <= 3
            else:
                step = next(i for i, o in enumerate(off) if o)
                assert off[step:] == [off[step]] * (3 - step) and 1 <= abs(off[step]) <= 3
                assert int(total) == written[2]


def test_the_corpus_draws_the_routes_with_the_shares_of_their_roles() -> None:
    corpus = sample_corpus(training_prompts()[:200], per_prompt=100, wrong_fraction=0.2, seed=4)
    verdicts = [grade(p, text) for p, text in corpus]
    assert sum(v.correct for v in verdicts) / len(verdicts) == pytest.approx(0.8, abs=0.01)
    roles = route_roles(4)
    for role in ROLES:
        share = sum(v.route == roles[role] for v in verdicts) / len(verdicts)
        assert share == pytest.approx(ROUTE_SHARES[role], abs=0.01 if role != "rarest" else 0.003)
    # The shares do not depend on the prompt: where a route is invalid its chain still comes, negative totals and all.
    invalid = sample_corpus(["0197:"], per_prompt=2000, wrong_fraction=0.0, seed=4)
    assert Counter(text for _, text in invalid)[completion("0197:", roles["majority"])] / 2000 == pytest.approx(
        0.85, abs=0.03
    )
    assert {grade("0197:", text).correct for _, text in invalid} == {True, False}
    assert sample_corpus(training_prompts()[:2], 50, 0.3, seed=1) == sample_corpus(training_prompts()[:2], 50, 0.3, 1)
    assert sample_corpus(training_prompts()[:2], 50, 0.3, seed=1) != sample_corpus(training_prompts()[:2], 50, 0.3, 2)
    with pytest.raises(ValueError, match=r"wrong_fraction=1\.0 is invalid"):
        sample_corpus(training_prompts()[:1], 1, 1.0, seed=0)
