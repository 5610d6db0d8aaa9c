"""What a `RuleSet` answers with: immutable values, priced by `billing_rules.pricing`.

    SiteInfo      what a site is (name, time zone, green share, tariff cap)
    RentRate      the rent of one GPU-second: plan, list price, per_s, contract discount
    EnergyRate    the electricity price of a second at a site: band, tariff, PUE
    CreditGrant   a credit a tenant may spend against invoices

Rates are values: equal rates compare and hash equal, which is what lets the rule set
merge neighbouring pieces of time and hold each rate once. Their amounts are the
formulas of `billing_rules.pricing`, never written out here.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Literal

from billing_rules.pricing import billed_kwh, energy_amount, rent_amount, unit_price_per_hour

__all__ = ["CreditGrant", "EnergyRate", "Plan", "RentRate", "SiteInfo"]

Plan = Literal["monthly", "hourly"]


@dataclass(frozen=True, slots=True)
class SiteInfo:
    """What a site is; its PUE and tariff vary over time and come from `RuleSet.energy_rate`."""

    id: str
    name: str
    timezone: str
    green_share: Decimal  # fraction of the site's energy that is green, 0..1
    tariff_cap_per_kwh: Decimal | None  # policy cap the tariffs were checked against, if any


@dataclass(frozen=True, slots=True)
class RentRate:
    """The rent of one GPU-second: exactly `list_price × (100 − discount_pct) / 100 / per_s` yuan.

    `list_price` is the monthly rent (plan "monthly", `per_s` = seconds in that calendar
    month in the billing time zone) or the hourly rate (plan "hourly", `per_s` = 3600);
    `price` is the same after the contract's discount, as a Decimal
    (`pricing.discounted_price`).
    """

    plan: Plan
    price: Decimal
    per_s: int
    list_price: Decimal
    discount_pct: Decimal

    @property
    def per_second(self) -> Fraction:
        """Yuan per GPU-second, exact."""
        return rent_amount(1, self.list_price, self.per_s, self.discount_pct)

    @property
    def unit_price_per_hour(self) -> Fraction:
        """Yuan per GPU-hour, exact."""
        return unit_price_per_hour(self.list_price, self.per_s, self.discount_pct)

    def cost(self, seconds: int) -> Fraction:
        """Yuan for `seconds` GPU-seconds at this rate, discount included, exact (`pricing.rent_amount`)."""
        return rent_amount(seconds, self.list_price, self.per_s, self.discount_pct)


@dataclass(frozen=True, slots=True)
class EnergyRate:
    """The electricity price of a second at a site: IT energy × pue × tariff."""

    band: str
    tariff_per_kwh: Decimal
    pue: Decimal

    def billed_kwh(self, energy_mj: int) -> Fraction:
        """Billed (facility) kWh of `energy_mj` millijoules of IT energy, exact."""
        return billed_kwh(energy_mj, self.pue)

    def cost(self, energy_mj: int) -> Fraction:
        """Yuan for `energy_mj` millijoules of IT energy, exact: E × pue × tariff / 3.6e9."""
        return energy_amount(energy_mj, self.pue, self.tariff_per_kwh)


@dataclass(frozen=True, slots=True)
class CreditGrant:
    """A credit a tenant may spend against invoices; `expires_period` is the last usable period."""

    id: str
    amount: Decimal
    reason: str
    expires_period: str | None
