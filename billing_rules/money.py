"""Money and quantities: exact until the one rounding, then two decimals.

Amounts are exact (`Fraction`, or `Decimal`/`int` that convert to one without loss)
until an invoice line is closed; `round_fen` is the one function that rounds money,
half up (ties away from zero, like Java's and Python's ROUND_HALF_UP), to 0.01.
Quantities (GPU-hours, kWh) are shown with six decimals by `round_quantity`, with
the same tie rule. Floats are refused: they cannot hold ¥0.33 exactly.

The formulas that produce the exact amounts live in `billing_rules.pricing`.
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

Exact = Fraction | Decimal | int

_FEN = Decimal("0.01")
_MICRO = Decimal("0.000001")


def _to_fraction(x: Exact) -> Fraction:
    if isinstance(x, bool) or not isinstance(x, (Fraction, Decimal, int)):
        raise TypeError(f"exact number required (Fraction, Decimal or int), got {type(x).__name__}")
    if isinstance(x, Decimal) and not x.is_finite():
        raise ValueError(f"finite number required, got {x}")
    return Fraction(x)


def _round_half_up(x: Exact, places: int) -> Decimal:
    """x rounded to `places` decimals, ties away from zero; exact for any Fraction."""
    q = _to_fraction(x) * 10**places
    magnitude = (abs(q.numerator) * 2 + q.denominator) // (2 * q.denominator)  # floor(|q| + 1/2)
    units = -magnitude if q < 0 else magnitude
    return Decimal(units).scaleb(-places) if units else Decimal(0).scaleb(-places)


def round_fen(x: Exact) -> Decimal:
    """Round an exact amount of yuan half up to the fen (0.01); the result has two decimals.

    >>> round_fen(Fraction(1, 200)), round_fen(Decimal("-0.005")), round_fen(Decimal("0.0449"))
    (Decimal('0.01'), Decimal('-0.01'), Decimal('0.04'))
    """
    return _round_half_up(x, 2)


def round_quantity(x: Exact) -> Decimal:
    """Round a quantity (GPU-hours, kWh, a unit price) half up to six decimals, for display."""
    return _round_half_up(x, 6)


def format_money(d: Exact) -> str:
    """Two decimals, e.g. "599.00"; an amount with more digits is rounded by `round_fen` first."""
    return str(round_fen(d))


def format_quantity(x: Exact) -> str:
    """Six decimals, half up, e.g. Fraction(2, 3) -> "0.666667"."""
    return str(round_quantity(x))


def is_fen_exact(d: Decimal) -> bool:
    """True when `d` is a finite amount with no digits below the fen."""
    return d.is_finite() and d == d.quantize(_FEN)
