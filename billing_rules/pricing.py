"""The money formulas of SPEC §4, in one place: what rented seconds and IT energy cost. Pure.

Every amount in gpubill — the rule set's rates, invoice lines, live spend, cost share,
what-if, usage reports and the audit — is computed by these functions, so no two
paths can price the same usage differently:

    gpu_hours(s)                           = s / 3600
    rent_amount(s, list, per_s, pct)       = s × list × (100 − pct) / 100 / per_s
    discount_amount(s, list, per_s, pct)   = s × list / per_s × pct / 100
    unit_price_per_hour(list, per_s, pct)  = rent_amount(3600, list, per_s, pct)
    billed_kwh(mJ, pue)                    = mJ × pue / 3.6e9        (IT energy × PUE, kWh)
    energy_amount(mJ, pue, tariff)         = billed_kwh(mJ, pue) × tariff

so that rent_amount(s, list, per_s, pct) = rent_amount(s, list, per_s) − discount_amount(…)
exactly. `list` is the model's monthly rent (per_s = seconds in that month) or hourly
rate (per_s = 3600); `pct` is the contract's discount in percent. Results are exact
`Fraction`s of yuan (or hours, or kWh); rounding is `billing_rules.money`'s, once, where
an invoice line or a report cell is closed.
"""
from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

from billing_rules.money import Exact

__all__ = [
    "MJ_PER_KWH",
    "S_PER_HOUR",
    "billed_kwh",
    "discount_amount",
    "discounted_price",
    "energy_amount",
    "gpu_hours",
    "rent_amount",
    "unit_price_per_hour",
]

MJ_PER_KWH = 3_600_000_000  # 1 kWh = 3.6e6 J = 3.6e9 mJ
S_PER_HOUR = 3600


def gpu_hours(seconds: int) -> Fraction:
    """GPU-hours of `seconds` GPU-seconds, exact."""
    return Fraction(seconds, S_PER_HOUR)


def rent_amount(seconds: int, list_price: Exact, per_s: int, discount_pct: Exact = Decimal(0)) -> Fraction:
    """Yuan for `seconds` rented GPU-seconds at `list_price / per_s` each, less `discount_pct` %, exact."""
    return Fraction(seconds) * Fraction(list_price) * (100 - Fraction(discount_pct)) / 100 / per_s


def discount_amount(seconds: int, list_price: Exact, per_s: int, discount_pct: Exact) -> Fraction:
    """Yuan that a `discount_pct` % contract discount takes off `rent_amount(seconds, list_price, per_s)`, exact, ≥ 0."""
    return Fraction(seconds) * Fraction(list_price) / per_s * Fraction(discount_pct) / 100


def unit_price_per_hour(list_price: Exact, per_s: int, discount_pct: Exact = Decimal(0)) -> Fraction:
    """Yuan per GPU-hour at `list_price / per_s` per second, less `discount_pct` %, exact."""
    return rent_amount(S_PER_HOUR, list_price, per_s, discount_pct)


def discounted_price(list_price: Decimal, discount_pct: Decimal) -> Decimal:
    """The rule files' price after a contract discount, as a Decimal: list × (100 − pct) / 100.

    For display and grouping (`RentRate.price`); amounts come from `rent_amount`, which
    is the same number kept as a Fraction.
    """
    return list_price if not discount_pct else list_price * (100 - discount_pct) / 100


def billed_kwh(energy_mj: int, pue: Exact) -> Fraction:
    """Billed (facility) kWh of `energy_mj` millijoules of IT energy at `pue`, exact."""
    return Fraction(energy_mj) * Fraction(pue) / MJ_PER_KWH


def energy_amount(energy_mj: int, pue: Exact, tariff_per_kwh: Exact) -> Fraction:
    """Yuan for `energy_mj` millijoules of IT energy at `pue` and `tariff_per_kwh`, exact."""
    return billed_kwh(energy_mj, pue) * Fraction(tariff_per_kwh)
