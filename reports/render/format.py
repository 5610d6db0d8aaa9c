"""How numbers and text are written in every rendered report: the one place for display rounding.

Amounts reaching the renderers are already rounded by the pricing code; the functions here
only *write* them. Should an unrounded value slip through, it is rounded half up (the
invoice rule), never half even, so a printed figure never disagrees with the ledger by
the way it was printed.

- money: two decimals, ``Decimal("599") -> "599.00"``, ``Decimal("-10") -> "-10.00"``;
- quantities (GPU-hours, kWh): at least six decimals, more are kept, never cut;
- unit prices: exactly six decimals;
- rates (PUE, VAT): as given, with at least two decimals (``"1.12"``, ``"0.06"``);
- PDF text: latin-1 only, since the PDFs use a core font.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

__all__ = [
    "as_decimal",
    "fraction_str",
    "grouped",
    "latin1",
    "money_str",
    "percent_str",
    "plain",
    "quantity_str",
    "rate_str",
    "round_half_up",
    "unit_price_str",
]

_STEP = {n: Decimal(1).scaleb(-n) for n in range(0, 13)}


def as_decimal(value: Decimal | int | str) -> Decimal:
    """Return ``value`` as a Decimal; floats are refused because they cannot hold fen exactly."""
    if isinstance(value, Decimal):
        return value
    if isinstance(value, bool) or isinstance(value, float):
        raise TypeError(f"expected Decimal or int for an amount, got {type(value).__name__} {value!r}")
    if isinstance(value, (int, str)):
        return Decimal(value)
    raise TypeError(f"expected Decimal or int for an amount, got {type(value).__name__} {value!r}")


def round_half_up(value: Decimal | int | str, places: int) -> Decimal:
    """Round to ``places`` decimals, half up; ``-0.00`` becomes ``0.00``."""
    rounded = as_decimal(value).quantize(_STEP[places], rounding=ROUND_HALF_UP)
    return rounded.copy_abs() if rounded.is_zero() else rounded


def money_str(value: Decimal | int | str) -> str:
    """Money with exactly two decimals: ``"599.00"``, ``"-10.00"``."""
    return f"{round_half_up(value, 2):f}"


def quantity_str(value: Decimal | int | str) -> str:
    """A quantity with at least six decimals; extra precision is kept, not rounded away."""
    d = as_decimal(value)
    exponent = d.as_tuple().exponent
    if isinstance(exponent, int) and exponent < -6:
        return f"{(d.copy_abs() if d.is_zero() else d):f}"
    return f"{round_half_up(d, 6):f}"


def unit_price_str(value: Decimal | int | str) -> str:
    """A unit price with exactly six decimals (CNY per GPU-hour or per kWh)."""
    return f"{round_half_up(value, 6):f}"


def fraction_str(value: Decimal | int | str) -> str:
    """A dimensionless fraction (e.g. electricity share ``0.0717``) with six decimals."""
    return f"{round_half_up(value, 6):f}"


def rate_str(value: Decimal | int | str) -> str:
    """A rate written as given but with at least two decimals: ``1.12``, ``0.06``, ``1.125``."""
    d = as_decimal(value)
    exponent = d.as_tuple().exponent
    if isinstance(exponent, int) and exponent < -2:
        d = d.normalize()
        exponent = d.as_tuple().exponent
    if isinstance(exponent, int) and exponent > -2:
        d = d.quantize(_STEP[2])
    return f"{d:f}"


def percent_str(fraction: Decimal | int | str, places: int = 2) -> str:
    """A fraction as a percentage for people: ``0.0717 -> "7.17 %"``."""
    return f"{round_half_up(as_decimal(fraction) * 100, places):f} %"


def grouped(value: Decimal | int | str, places: int) -> str:
    """A number for people, with thousands separators: ``1234.5 -> "1,234.50"``."""
    return f"{round_half_up(value, places):,f}"


_LATIN1_SWAPS = str.maketrans(
    {
        "\u2014": "-",  # em dash
        "\u2013": "-",  # en dash
        "\u2212": "-",  # minus sign
        "\u2018": "'",
        "\u2019": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u2026": "...",
        "\u00a0": " ",
        "\u00a5": "CNY ",  # the yen/yuan sign is latin-1 but reads badly in Helvetica tables
        "\uffe5": "CNY ",
        "\u00d7": "x",
    }
)


def latin1(text: object) -> str:
    """Text safe for the PDF core fonts: common typography swapped, anything else becomes '?'."""
    s = "" if text is None else str(plain(text))
    return s.translate(_LATIN1_SWAPS).encode("latin-1", errors="replace").decode("latin-1")


def plain(value: object) -> object:
    """Unwrap enums to their value so they print as ``draft``, not ``Status.DRAFT``."""
    return value.value if isinstance(value, enum.Enum) else value


def renderer_for(renderers: Mapping[str, Callable[[Any], bytes]], fmt: str, what: str) -> Callable[[Any], bytes]:
    """The renderer of `fmt` among `renderers`; a ValueError naming the formats there are."""
    try:
        return renderers[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r} for {what}; use one of: {', '.join(renderers)}") from None
