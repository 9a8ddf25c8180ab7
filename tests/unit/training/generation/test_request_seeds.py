"""Each vLLM request gets its own seed, derived from the user's: retries and processes never share a seed range."""

from __future__ import annotations

import itertools

from maxent_grpo.training.generation.backends.request_seeds import RequestSeeds


def test_without_a_user_seed_no_seed_is_sent():
    assert RequestSeeds(None, 0).next_call(3) == [None, None, None]


def test_seeds_differ_per_request_call_and_process_and_repeat_with_the_user_seed():
    first, other_process = RequestSeeds(7, 0), RequestSeeds(7, 1)
    seeds = [first.next_call(4), first.next_call(4), other_process.next_call(4), other_process.next_call(4)]
    flat = [seed for call in seeds for seed in call]
    # vLLM samples completion k of a request seeded s from s + k: ranges of 1000 completions do not overlap.
    starts = sorted(flat)
    assert all(later - earlier > 1000 for earlier, later in itertools.pairwise(starts))
    assert all(0 <= seed < 2**62 for seed in flat)
    again = RequestSeeds(7, 0)
    assert [again.next_call(4), again.next_call(4)] == seeds[:2]
    assert RequestSeeds(8, 0).next_call(4) != seeds[0]
