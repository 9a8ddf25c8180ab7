"""`pool_members`: when a down server is tried again, how its rate is kept, and how a call's groups are split."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from maxent_grpo.training.generation.backends.pool_members import (
    MAX_BACKOFF_CALLS,
    Member,
    Report,
    agree,
    split_by_rate,
)


def test_a_down_server_is_tried_one_call_later_then_after_twice_as_many_calls_each_time_capped():
    member = Member()
    member.bring_up()
    assert member.mark_down(call=10, reason="hung") and not member.mark_down(call=10, reason="hung")
    assert not member.canary_due(10) and member.canary_due(11)
    gaps, call = [], 11
    for _ in range(8):
        member.canary_failed(call)
        gaps.append(member.retry_at - call)
        call = member.retry_at
    assert gaps == [2, 4, 8, 16, 32, 32, 32, 32] and max(gaps) == MAX_BACKOFF_CALLS
    member.bring_up()
    assert member.up and member.reason is None and member.probe
    # back up, it fails again before answering a call in full: the wait keeps growing (a 5xx server whose health
    # check answers costs a shrinking share, never every other call)
    assert member.mark_down(call=100, reason="failed") and not member.canary_due(131) and member.canary_due(132)
    member.bring_up()
    member.answered_in_full()  # it answered a call in full: its backoff is forgotten
    assert member.mark_down(call=200, reason="failed") and member.canary_due(201)


def test_a_rate_is_a_moving_average_and_a_lost_hedge_bounds_it():
    member = Member()
    member.measured(10, 1.0)
    member.measured(30, 1.0)
    assert member.rate == 20.0
    member.at_most(4, 2.0)
    assert member.rate == 2.0
    member.at_most(100, 1.0)  # a bound above what is known changes nothing
    assert member.rate == 2.0


def test_equal_servers_take_turns_and_a_slow_one_gets_less():
    assert split_by_rate([0, 1, 2, 3], [2] * 4, {0: None, 1: None}, first=1) == {0: [1, 3], 1: [0, 2]}
    shares = split_by_rate(list(range(12)), [2] * 12, {0: 10.0, 1: 10.0, 2: 2.0})
    assert [len(shares[k]) for k in (0, 1, 2)] == [6, 5, 1]  # all finish by 12 / 10 s; the slow one in 1 s
    # A server back up and not measured yet gets one group even when its bound rate is tiny.
    assert split_by_rate([0, 1, 2], [1] * 3, {0: 100.0, 1: 0.001}, at_least_one=[1])[1] == [0]


@given(
    counts=st.lists(st.integers(min_value=0, max_value=8), max_size=24),
    rates=st.lists(st.one_of(st.none(), st.floats(min_value=0.01, max_value=100.0)), min_size=1, max_size=8),
    first=st.integers(min_value=0, max_value=7),
)
def test_every_group_goes_to_exactly_one_server(counts, rates, first):
    indices = [i for i, count in enumerate(counts) if count > 0]
    servers = dict(enumerate(rates))
    shares = split_by_rate(indices, counts, servers, first=first, at_least_one=[0])
    assert set(shares) == set(servers)
    assert sorted(i for share in shares.values() for i in share) == indices
    assert all(share == sorted(share) for share in shares.values())


def test_a_server_passed_over_is_taken_to_be_faster_until_it_is_measured_again():
    member = Member(up=True, rate=1.0)
    calls = 0
    while split_by_rate([0, 1, 2, 3], [2] * 4, {0: 10.0, 1: member.rate})[1] == []:
        member.passed_over(best=10.0)
        calls += 1
        assert calls < 20, "a server once measured slow never got work again"
    assert member.rate <= 10.0


def test_a_rate_measured_on_one_process_leaves_the_backoff_to_the_agreement():
    member = Member()
    member.bring_up()
    member.mark_down(call=1, reason="hung")
    member.bring_up()
    member.measured(8, 1.0)  # this process's rate only: every process must keep the same backoff
    assert member.probe and member.rate == 8.0
    member.answered_in_full()
    assert not member.probe and member.backoff == 1


def test_one_verdict_from_the_processes_reports():
    hung, failed = Report(), Report()
    hung.mark_down(1, "failed", "a 5xx")
    hung.mark_down(1, "hung", "its share lost a hedge")
    hung.mark_down(1, "failed", "refused")  # weaker than what was seen before in the call: the hang stays
    failed.mark_down(1, "failed", "the connection was refused")
    failed.mark_down(2, "wrong model", "it serves 'another'")
    hung.healthy, failed.healthy = {0, 3}, {3}
    hung.canaries[4] = None
    failed.answered.add(0)
    failed.unavailable = "refused"

    agreement = agree([failed, hung])

    assert agreement.down == {1: ("hung", "its share lost a hedge", 1), 2: ("wrong model", "it serves 'another'", 0)}
    assert agreement.healthy == {3}  # healthy only where every process found it so
    assert agreement.canaries == {4: None} and agreement.answered == {0}
    assert agreement.unavailable == (0, "refused")
    assert agree([Report()]).down == {} and agree([Report()]).unavailable is None
