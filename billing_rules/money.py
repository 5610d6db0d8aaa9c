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


def apportion(exacts: list[Exact], total: Decimal, places: int) -> list[Decimal]:
    """Round each of `exacts` to `places` decimals so that the results add up to `total` exactly.

    For the rows of a document whose total is an invoice's rounded line sum (a usage report's
    rows against its invoice): each value is rounded down, then the units `total` still needs
    go one each to the values with the largest remainders (ties in list order), so a result
    is within one unit of the last place of its exact value whenever `total` is within
    one unit per value of Σ exacts (what rounding a few lines half up can move it). The
    invoice's own figures are still rounded by `round_fen`; this only shares a total out.

    >>> apportion([Fraction(1, 3)] * 3, Decimal("1.00"), 2)
    [Decimal('0.34'), Decimal('0.33'), Decimal('0.33')]
    """
    scale = 10**places
    units = [_to_fraction(x) * scale for x in exacts]
    floors = [q.numerator // q.denominator for q in units]
    target = _to_fraction(total) * scale
    if target.denominator != 1:
        raise ValueError(f"total {total} has more than {places} decimals")
    extra = int(target) - sum(floors)
    if not units:
        if extra:
            raise ValueError(f"cannot share {total} out over no values")
        return []
    each, rest = divmod(extra, len(units))  # each < 0 or > 0 only when total is far from Σ exacts
    by_remainder = sorted(range(len(units)), key=lambda i: (-(units[i] - floors[i]), i))
    shares = [floor + each for floor in floors]
    for i in by_remainder[:rest]:
        shares[i] += 1
    return [Decimal(n).scaleb(-places) for n in shares]
