"""Every printed figure has the same significant digits (`number_format`)."""

from __future__ import annotations

import pytest

from maxent_grpo.number_format import byte_size, figure


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.078125, "0.0781"),
        (0.20625, "0.206"),
        (-0.39, "-0.390"),  # trailing zeros kept: "[-0.390, 0.281]", not "[-0.39, 0.2812]"
        (0.28125, "0.281"),
        (12.0, "12.0"),
        (100.0, "100"),
        (999.7, "1000"),
        (1234.5, "1234"),  # every digit before the point
        (1e-5, "1.00e-05"),
        (0.0, "0"),
        (3, "3"),
        (float("nan"), "nan"),
    ],
)
def test_a_figure_has_three_significant_digits(value, text):
    assert figure(value) == text


def test_a_signed_figure_and_a_byte_size():
    assert (figure(0.1952, signed=True), figure(-0.1952, signed=True), figure(0.0, signed=True)) == (
        "+0.195",
        "-0.195",
        "0",
    )
    assert [byte_size(size) for size in (2_100_000_000, 541_234_567, 12_000, 40)] == [
        "2.10 GB",
        "541 MB",
        "12.0 kB",
        "40 bytes",
    ]
