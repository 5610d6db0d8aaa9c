"""Invoice assembly (SPEC §5): priced usage in, invoice lines and totals out. Pure.

`build_invoice` takes what the rating step already priced — rent seconds with the rate
they were priced at, energy with its band, tariff and PUE — plus adjustments for late
data of finalized periods and the credit the tenant still has. It returns an
`InvoiceDraft` whose every line keeps both its exact amount and the amount rounded once,
half up to the fen, by `round_fen`. Inputs may come in any order: lines are grouped and
sorted, so a replay in another order gives the same draft.

Totals:
    subtotal = Σ rounded rent + electricity + adjustment lines
    credit   = −min(credit_available, max(subtotal, 0))      (a credit line only if ≠ 0)
    net      = subtotal + credit                              (never below 0 because of credit)
    tax      = round_fen(net × vat_rate)
    total    = net + tax

Line conventions: rent quantity is GPU-hours (seconds / 3600) at a unit price per
GPU-hour; electricity quantity is billed kWh (IT energy × PUE) at the tariff per kWh;
both are shown with six decimals. Adjustment and credit lines have quantity 1, unit ""
and unit_price equal to their amount. Contract discounts are already in the rent price
(see `RentRate`), so this module emits no "discount" lines.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from billing_rules.money import MJ_PER_KWH, S_PER_HOUR, is_fen_exact, round_fen, round_quantity
from billing_rules.periods import parse_period
from billing_rules.ruleset import CreditGrant, EnergyRate, RentRate

_ONE = Decimal("1.000000")


@dataclass(frozen=True)
class RentUsage:
    """`seconds` rented GPU-seconds of `gpu_model`, each costing exactly price / per_s."""

    gpu_model: str
    plan: str
    price: Decimal
    per_s: int
    seconds: int

    @classmethod
    def priced(cls, gpu_model: str, rate: RentRate, seconds: int) -> RentUsage:
        return cls(gpu_model=gpu_model, plan=rate.plan, price=rate.price, per_s=rate.per_s, seconds=seconds)


@dataclass(frozen=True)
class EnergyUsage:
    """`energy_mj` millijoules of IT energy at `site` in tariff `band`, before PUE."""

    site: str
    band: str
    tariff_per_kwh: Decimal
    pue: Decimal
    energy_mj: int

    @classmethod
    def priced(cls, site: str, rate: EnergyRate, energy_mj: int) -> EnergyUsage:
        return cls(site=site, band=rate.band, tariff_per_kwh=rate.tariff_per_kwh, pue=rate.pue, energy_mj=energy_mj)


@dataclass(frozen=True)
class Adjustment:
    """A correction for `ref_period` (late data after it was finalized); `amount` is signed, whole fen."""

    ref_period: str
    description: str
    amount: Decimal


@dataclass(frozen=True)
class InvoiceLine:
    kind: str  # rent | electricity | credit | discount | adjustment
    gpu_model: str | None
    plan: str | None
    site: str | None
    band: str | None
    pue: Decimal | None
    ref_period: str | None
    description: str
    quantity: Decimal  # GPU-hours or billed kWh, six decimals; 1 for credit and adjustment lines
    unit: str  # "GPU-hour", "kWh" or ""
    unit_price: Decimal  # ¥ per GPU-hour or per kWh, six decimals; the amount for credit/adjustment
    exact_amount: Fraction
    amount: Decimal  # round_fen(exact_amount)


@dataclass(frozen=True)
class InvoiceDraft:
    tenant: str
    period: str
    lines: tuple[InvoiceLine, ...]
    subtotal: Decimal
    net: Decimal
    tax: Decimal
    total: Decimal
    credit_used: Decimal  # ≥ 0: how much credit this invoice consumed
    vat_rate: Decimal


def build_invoice(
    tenant: str,
    period: str,
    rent: Iterable[RentUsage],
    energy: Iterable[EnergyUsage],
    adjustments: Iterable[Adjustment],
    credit_available: Decimal,
    vat_rate: Decimal,
) -> InvoiceDraft:
    """Assemble the invoice of `tenant` for `period`; see the module docstring for the arithmetic.

    Raises ValueError for negative seconds or energy, an adjustment that is not whole fen,
    or a negative `credit_available`.
    """
    parse_period(period)
    if credit_available < 0:
        raise ValueError(f"credit_available must be ≥ 0, got {credit_available}")
    lines = [*_rent_lines(rent), *_electricity_lines(energy), *_adjustment_lines(adjustments)]
    subtotal = sum((line.amount for line in lines), Decimal("0.00"))

    credit_used = round_fen(min(credit_available, max(subtotal, Decimal(0))))
    if credit_used:
        lines.append(_flat_line("credit", None, "Credit applied", -credit_used))
    net = subtotal - credit_used
    tax = round_fen(Fraction(net) * Fraction(vat_rate))
    return InvoiceDraft(
        tenant=tenant,
        period=period,
        lines=tuple(lines),
        subtotal=subtotal,
        net=net,
        tax=tax,
        total=net + tax,
        credit_used=credit_used,
        vat_rate=vat_rate,
    )


def credit_available(grants: Iterable[CreditGrant], used_before: Decimal) -> Decimal:
    """Credit left to spend: Σ grant amounts − credit used by earlier invoices, never below 0.

    `expires_period` is not honoured yet: grants are treated as one pool.
    """
    granted = sum((g.amount for g in grants), Decimal("0.00"))
    return max(granted - used_before, Decimal("0.00"))


def _rent_lines(usages: Iterable[RentUsage]) -> list[InvoiceLine]:
    # One line per (model, plan, unit price per GPU-hour); sums stay exact until rounding.
    groups: dict[tuple[str, str, Fraction], list] = {}
    for usage in usages:
        if usage.seconds < 0 or usage.per_s <= 0:
            raise ValueError(f"rent usage needs seconds ≥ 0 and per_s > 0: {usage}")
        per_hour = Fraction(usage.price) * S_PER_HOUR / usage.per_s
        group = groups.setdefault((usage.gpu_model, usage.plan, per_hour), [0, Fraction(0)])
        group[0] += usage.seconds
        group[1] += usage.seconds * Fraction(usage.price) / usage.per_s
    lines = []
    for (gpu_model, plan, per_hour), (seconds, exact) in sorted(groups.items()):
        if seconds == 0:
            continue
        lines.append(
            InvoiceLine(
                kind="rent",
                gpu_model=gpu_model,
                plan=plan,
                site=None,
                band=None,
                pue=None,
                ref_period=None,
                description=f"{gpu_model} GPU rent, {plan} plan",
                quantity=round_quantity(Fraction(seconds, S_PER_HOUR)),
                unit="GPU-hour",
                unit_price=round_quantity(per_hour),
                exact_amount=exact,
                amount=round_fen(exact),
            )
        )
    return lines


def _electricity_lines(usages: Iterable[EnergyUsage]) -> list[InvoiceLine]:
    # One line per (site, band, tariff, PUE); billed kWh = mJ × PUE / 3.6e9.
    groups: dict[tuple[str, str, Decimal, Decimal], int] = {}
    for usage in usages:
        if usage.energy_mj < 0:
            raise ValueError(f"energy usage needs energy_mj ≥ 0: {usage}")
        key = (usage.site, usage.band, usage.tariff_per_kwh, usage.pue)
        groups[key] = groups.get(key, 0) + usage.energy_mj
    lines = []
    for (site, band, tariff, pue), energy_mj in sorted(groups.items()):
        if energy_mj == 0:
            continue
        billed_kwh = Fraction(energy_mj) * Fraction(pue) / MJ_PER_KWH
        exact = billed_kwh * Fraction(tariff)
        lines.append(
            InvoiceLine(
                kind="electricity",
                gpu_model=None,
                plan=None,
                site=site,
                band=band,
                pue=pue,
                ref_period=None,
                description=f"Electricity at {site}, {band} band, PUE {pue}",
                quantity=round_quantity(billed_kwh),
                unit="kWh",
                unit_price=round_quantity(tariff),
                exact_amount=exact,
                amount=round_fen(exact),
            )
        )
    return lines


def _adjustment_lines(adjustments: Iterable[Adjustment]) -> list[InvoiceLine]:
    lines = []
    for adj in sorted(adjustments, key=lambda a: (a.ref_period, a.description, a.amount)):
        parse_period(adj.ref_period)
        if not is_fen_exact(adj.amount):
            raise ValueError(f"adjustment amount must be whole fen, got {adj.amount}")
        lines.append(_flat_line("adjustment", adj.ref_period, adj.description, adj.amount))
    return lines


def _flat_line(kind: str, ref_period: str | None, description: str, amount: Decimal) -> InvoiceLine:
    amount = round_fen(amount)  # already whole fen; this only normalises to two decimals
    return InvoiceLine(
        kind=kind,
        gpu_model=None,
        plan=None,
        site=None,
        band=None,
        pue=None,
        ref_period=ref_period,
        description=description,
        quantity=_ONE,
        unit="",
        unit_price=round_quantity(amount),
        exact_amount=Fraction(amount),
        amount=amount,
    )
