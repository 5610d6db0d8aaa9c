"""round_fen is the one rounding: half up (ties away from zero) to 0.01."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest

from billing_rules import MJ_PER_KWH, format_money, format_quantity, round_fen


@pytest.mark.parametrize(
    ("exact", "fen"),
    [
        (Fraction(1, 200), "0.01"),  # 0.005 is a tie: up
        (Decimal("0.015"), "0.02"),
        (Decimal("0.025"), "0.03"),  # half-even would give 0.02
        (Decimal("0.045"), "0.05"),  # VAT on ¥0.75 at 6 %
        (Decimal("0.0449999"), "0.04"),
        (Fraction(2, 3), "0.67"),
        (Fraction(1, 3), "0.33"),
        (Decimal("-0.005"), "-0.01"),  # ties away from zero, so negative lines mirror positive ones
        (Fraction(-1, 1000), "0.00"),  # no "-0.00"
        (Decimal("-0.00"), "0.00"),
        (599, "599.00"),
        (Decimal("228.057984"), "228.06"),
        (Fraction(1178299584, 78125), "15082.23"),  # 15 082.2346752
    ],
)
def test_round_fen(exact: Fraction | Decimal | int, fen: str) -> None:
    assert round_fen(exact) == Decimal(fen)
    assert str(round_fen(exact)) == fen


def test_floats_are_refused() -> None:
    with pytest.raises(TypeError):
        round_fen(0.1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "text"),
    [(Decimal("599"), "599.00"), (Decimal("7.5"), "7.50"), (Decimal("-12.5"), "-12.50"), (Decimal("0"), "0.00")],
)
def test_format_money(value: Decimal, text: str) -> None:
    assert format_money(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Fraction(2, 3), "0.666667"),
        (Fraction(1, 2_000_000), "0.000001"),  # 0.0000005: tie, up
        (Fraction(28_800, 3600), "8.000000"),  # 8 GPU-hours
        (Decimal("691.0848"), "691.084800"),
    ],
)
def test_format_quantity(value: Fraction | Decimal, text: str) -> None:
    assert format_quantity(value) == text


def test_millijoules_per_kwh() -> None:
    assert MJ_PER_KWH == 1000 * 3600 * 1000  # mJ per J × s per h × W per kW


# apportion: rows shared out of a rounded total (billing_rules.money.apportion) ---------------

from billing_rules.money import apportion  # noqa: E402


@pytest.mark.parametrize("exacts, total, places, expected", [
    # 3 × 1/3 = 1.00: floors 0.33 × 3 = 0.99, one fen to the first of the equal remainders
    ([Fraction(1, 3)] * 3, Decimal("1.00"), 2, ["0.34", "0.33", "0.33"]),
    # 4 × 0.0325 = 0.13: floors 0.03 × 4 = 0.12, the one fen left to the first
    ([Fraction(325, 10_000)] * 4, Decimal("0.13"), 2, ["0.04", "0.03", "0.03", "0.03"]),
    # largest remainder first: 0.018 (rem .8), 0.012 (rem .2), total 0.03 → 0.02, 0.01
    ([Fraction(18, 1000), Fraction(12, 1000)], Decimal("0.03"), 2, ["0.02", "0.01"]),
    # one line of 2 × 2/3 = 1.333… → 1.33; floors 0.66 + 0.66 = 1.32, one fen to the first
    ([Fraction(2, 3)] * 2, Decimal("1.33"), 2, ["0.67", "0.66"]),
    # two lines that each rounded up (0.005 → 0.01) over one row of 0.01: the row takes both
    ([Fraction(1, 100)], Decimal("0.02"), 2, ["0.02"]),
    # 7 × 1/7 = 1 to six places: floors 0.142857 × 7 = 0.999999, one millionth to the first
    ([Fraction(1, 7)] * 7, Decimal("1.000000"), 6, ["0.142858"] + ["0.142857"] * 6),
    ([], Decimal("0.00"), 2, []),
])
def test_apportion_shares_a_total_out_by_largest_remainder(exacts, total, places, expected):
    shares = apportion(exacts, total, places)
    assert [str(s) for s in shares] == expected
    assert sum(shares, Decimal(0)) == total


def test_apportion_refuses_a_total_finer_than_its_places():
    with pytest.raises(ValueError, match="more than 2 decimals"):
        apportion([Fraction(1, 3)], Decimal("0.333"), 2)
