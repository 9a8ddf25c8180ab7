"""Equivalence margins from ``--margin METRIC=VALUE``: defaults, names or labels, numbers or percentages."""

from __future__ import annotations

import pytest

from maxent_grpo.bench.margins import Margin, margins, parse_margin
from maxent_grpo.bench.metrics import METRICS


def test_every_metric_has_a_default_margin():
    chosen = margins([])
    assert set(chosen) == {metric.name for metric in METRICS}
    assert {name: str(margin) for name, margin in chosen.items()} == {
        metric.name: metric.default_margin for metric in METRICS
    }


def test_a_margin_is_a_number_in_the_metrics_unit_or_a_percentage_of_the_baseline():
    assert parse_margin("0.01") == Margin(0.01, relative=False)
    assert parse_margin(" 2% ") == Margin(2.0, relative=True)
    assert parse_margin("2%").resolve(-50.0) == pytest.approx(1.0)  # of the baseline's magnitude
    assert parse_margin("0.25").resolve(1000.0) == 0.25
    assert str(parse_margin("2.5%")) == "2.5%" and str(parse_margin("0.010")) == "0.01"


def test_margins_take_a_metrics_name_or_label_and_the_last_one_wins():
    chosen = margins(["reward=0.01", "step time (s)=2%", "step_time=3%", "tokens/s=100"])
    assert chosen["reward"] == Margin(0.01, relative=False)
    assert chosen["step_time"] == Margin(3.0, relative=True)
    assert chosen["tokens_per_second"] == Margin(100.0, relative=False)
    assert chosen["loss"] == parse_margin(next(m.default_margin for m in METRICS if m.name == "loss"))


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("reward", "expected METRIC=VALUE"),
        ("speed=1", "expected METRIC=VALUE"),
        ("reward=", "'' is not a margin"),
        ("reward=fast", "'fast' is not a margin"),
        ("reward=-0.1", "'-0.1' is not a margin"),
        ("reward=inf", "'inf' is not a margin"),
        ("reward=nan%", "'nan%' is not a margin"),
    ],
)
def test_bad_margins_are_one_sentence(item, message):
    with pytest.raises(ValueError, match=message) as raised:
        margins([item])
    assert str(raised.value).startswith(f"--margin {item!r}: ") and "\n" not in str(raised.value)
