"""How numbers and text are written in every rendered report: the one place for display rounding.

Amounts reaching the renderers are already rounded by the pricing code; the functions here
only *write* them. Should an unrounded value slip through, it is rounded half up (the
invoice rule), never half even, so a printed figure never disagrees with the ledger by
the way it was printed.

- money: two decimals, ``Decimal("599") -> "599.00"``, ``Decimal("-10") -> "-10.00"``;
- quantities (GPU-hours, kWh): at least six decimals, more are kept, never cut;
- unit prices: exactly six decimals;
- rates (PUE, VAT): as given, with at least two decimals (``"1.12"``, ``"0.06"``);
- PDF text in a core-font PDF: latin-1 only (:func:`latin1`; :func:`fits_latin1` says whether
  a text needs more, and then the PDF embeds a CJK font: reports/render/pdf.py);
- terminal text (:func:`terminal_text`): rich markup escaped, control characters shown as
  ``\\x1b`` (a backslash doubled), never sent raw, since tenants, sites, reasons and dead letters come from outside;
- CSV cells (:func:`csv_cell`): text that a spreadsheet would run as a formula is quoted
  with a leading ``'`` (OWASP CSV injection); plain decimal numbers stay numbers.
"""

from __future__ import annotations

import enum
import re
import unicodedata
from collections.abc import Callable, Mapping
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

__all__ = [
    "as_decimal",
    "csv_cell",
    "fits_latin1",
    "fraction_str",
    "grouped",
    "latin1",
    "money_str",
    "percent_str",
    "plain",
    "quantity_str",
    "rate_str",
    "round_half_up",
    "terminal_text",
    "unit_price_str",
    "visible_text",
    "yuan_str",
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


def yuan_str(value: Decimal | int | str) -> str:
    """Money for people on a terminal or in text: ``¥1,234.56``, ``-¥10.00`` (half up to the fen)."""
    rounded = round_half_up(value, 2)
    return f"{'-' if rounded < 0 else ''}¥{grouped(rounded.copy_abs(), 2)}"


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


def fits_latin1(text: object) -> bool:
    """Whether :func:`latin1` writes `text` without a ``?`` for a character it cannot hold."""
    s = "" if text is None else str(plain(text))
    try:
        s.translate(_LATIN1_SWAPS).encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


def plain(value: object) -> object:
    """Unwrap enums to their value so they print as ``draft``, not ``Status.DRAFT``."""
    return value.value if isinstance(value, enum.Enum) else value


def renderer_for(renderers: Mapping[str, Callable[[Any], bytes]], fmt: str, what: str) -> Callable[[Any], bytes]:
    """The renderer of `fmt` among `renderers`; a ValueError naming the formats there are."""
    try:
        return renderers[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r} for {what}; use one of: {', '.join(renderers)}") from None


# Characters that act on a terminal instead of being shown: C0 and C1 controls, DEL (category
# Cc), line and paragraph separators, and the bidirectional overrides and isolates that
# reorder what a reader sees (Trojan Source).
_INVISIBLE = frozenset("\u061c\u200e\u200f\u2028\u2029\u202a\u202b\u202c\u202d\u202e"
                       "\u2066\u2067\u2068\u2069")


def _visible(char: str) -> str:
    if char in _INVISIBLE or unicodedata.category(char) == "Cc":
        code = ord(char)
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    return char


def visible_text(value: object, keep: str = "") -> str:
    """`value` as text with every control character (but those in `keep`) written as ``\\x1b``,
    ``\\u202e``: what `terminal_text` does without the markup, for text written to a terminal
    by other means (a CSV or JSON report on stdout keeps ``keep="\\n\\t"``)."""
    text = "" if value is None else str(plain(value))
    return "".join(c if c in keep else _visible(c) for c in text)


def terminal_text(value: object, limit: int | None = None) -> str:
    """`value` as text that a rich console prints exactly as it is, whatever it holds.

    Control characters (ESC, CR, BEL, NUL, C1, bidi overrides) become visible escapes such as
    ``\\x1b``, and a backslash is shown doubled, as Python writes it (so a ``\\x1b`` on
    screen always was an ESC); rich markup (``[bold red]``, ``[/x]``) is escaped, so the
    text can go into an f-string printed with markup, or into a rich Table cell. ``limit``
    cuts the visible text to that many characters before the markup is escaped (so no
    escape is cut in half).
    """
    from rich.markup import escape  # rich is imported by every caller that prints anyway

    text = "" if value is None else str(plain(value))
    shown = visible_text(text.replace("\\", "\\\\"))
    return escape(shown if limit is None else shown[:limit])


_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?")
_FORMULA_START = ("=", "+", "-", "@")


def csv_cell(value: Any) -> Any:
    """A CSV cell that no spreadsheet runs as a formula (OWASP: prefix such text with ``'``).

    Text starting with ``=``, ``+``, ``-``, ``@`` or a control character (TAB, CR, ...) gets
    a leading ``'``. A plain decimal number (``-1.00``, ``42``) is left alone: a spreadsheet
    reads it as the number it is, which finance needs, and it cannot hold a formula. Values
    that are not text (ints, None) pass through.
    """
    if not isinstance(value, str) or not value or _NUMBER.fullmatch(value):
        return value
    first = value[0]
    if first in _FORMULA_START or unicodedata.category(first) == "Cc":
        return "'" + value
    return value
