"""Invoice assembly (SPEC §5): priced usage in, invoice lines and totals out. Pure.

`build_invoice` takes what the rating step already priced — rent seconds with the rate
they were priced at, energy with its band, tariff and PUE — plus adjustments for late
data of finalized periods and the credit the tenant still has. It returns an
`InvoiceDraft` whose every line keeps both its exact amount and the amount rounded once,
half up to the fen, by `round_fen`. Inputs may come in any order: lines are grouped and
sorted, so a replay in another order gives the same draft.

Totals (SPEC §5):
    subtotal = Σ rounded rent + electricity + adjustment lines
    discount = Σ rounded discount lines (negative: a contract's discount on its rent lines)
    concession = −Σ carried goodwill notes (a replacement only: billing_rules/concessions.py),
               each capped at what is still owed, one line per note
    credit   = −min(credits available, max(subtotal + discount + concession, 0)), one line per grant used
    net      = subtotal + discount + concession + credit     (never below 0 because of either)
    tax      = round_fen(net × vat_rate)
    total    = net + tax

Line conventions: rent quantity is GPU-hours (seconds / 3600) at the list unit price per
GPU-hour; electricity quantity is billed kWh (IT energy × PUE) at the tariff per kWh;
both are shown with six decimals. A discount line has the GPU-hours of the rent it
discounts and a negative unit price. An adjustment line about a rent or electricity line
of an earlier period carries that line's grouping fields and unit price, with the
quantity and amount that changed; other adjustments and credit lines have quantity 1,
unit "" and unit_price equal to their amount; so have concession lines. Credits are spent
soonest-expiring first; a credit line names its grant (`credit_id`), a concession line the
goodwill credit note it carries (`credit_id` = CN-YYYY-NNNNNN).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from billing_rules.concessions import Concession, concede
from billing_rules.money import is_fen_exact, round_fen, round_quantity
from billing_rules.periods import parse_period
from billing_rules.pricing import (
    S_PER_HOUR,
    billed_kwh,
    discount_amount,
    energy_amount,
    gpu_hours,
    rent_amount,
    unit_price_per_hour,
)
from billing_rules.rates import CreditGrant

_ONE = Decimal("1.000000")


@dataclass(frozen=True)
class RentUsage:
    """`seconds` rented GPU-seconds of `gpu_model`, each costing exactly price / per_s."""

    gpu_model: str
    plan: str
    price: Decimal  # list price: monthly rent or hourly rate
    per_s: int
    seconds: int
    discount_pct: Decimal = Decimal(0)  # the contract's discount, a separate discount line


@dataclass(frozen=True)
class EnergyUsage:
    """`energy_mj` millijoules of IT energy at `site` in tariff `band`, before PUE."""

    site: str
    band: str
    tariff_per_kwh: Decimal
    pue: Decimal
    energy_mj: int


@dataclass(frozen=True)
class Adjustment:
    """A correction for `ref_period` (late data after it was finalized); `amount` is signed, whole fen.

    When it corrects a rent or electricity line, the grouping fields, unit and unit price
    are that line's and `quantity` is the GPU-hours or kWh that changed.
    """

    ref_period: str
    description: str
    amount: Decimal
    gpu_model: str | None = None
    plan: str | None = None
    site: str | None = None
    band: str | None = None
    pue: Decimal | None = None
    quantity: Decimal | None = None
    unit: str = ""
    unit_price: Decimal | None = None


@dataclass(frozen=True)
class CreditBalance:
    """What is left of one credit grant for the period being invoiced."""

    id: str
    reason: str
    remaining: Decimal
    expires_period: str | None = None


@dataclass(frozen=True)
class InvoiceLine:
    """One line of an invoice, as built here, stored (`invoice_lines`) and rendered: the one line shape."""

    kind: str  # rent | electricity | credit | discount | adjustment | concession
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
    credit_id: str | None = None  # credit lines: the grant spent; concession lines: the credit note carried


@dataclass(frozen=True)
class InvoiceDraft:
    """What `build_invoice` returns: the lines and totals of one tenant's invoice for one period."""

    tenant: str
    period: str
    lines: tuple[InvoiceLine, ...]
    subtotal: Decimal
    net: Decimal
    tax: Decimal
    total: Decimal
    credit_used: Decimal  # ≥ 0: how much credit (of grants) this invoice consumed; concessions not included
    vat_rate: Decimal


@dataclass(frozen=True)
class IssuedInvoice(InvoiceDraft):
    """A draft once stored: what storing it adds (its id, number, status, issue time and currency).

    The line order is the stored `line_no` order; nothing else about a line changes. A stored
    draft (status "draft") has an id and no number; an issued or voided invoice has both.
    """

    number: str  # "GB-2026-000001": sequential and gap-free per year; "" while a draft
    status: str  # "draft" | "issued" | "voided"
    issued_at: str  # RFC 3339, UTC ("2026-04-03T02:00:00Z"); a draft: when it was made or refreshed
    currency: str  # "CNY"
    id: str = ""  # the document's id: "DRAFT-…" for one made as a draft, else its number
    revision: int = 1  # the stored lines' revision (a draft refreshed by late data has a later one)
    replaces: str = ""  # the voided invoice this one replaces
    rules_revision: str = ""  # the revision of the rule set that priced it (RuleSet.revision); "" before 0021


def build_invoice(
    tenant: str,
    period: str,
    rent: Iterable[RentUsage],
    energy: Iterable[EnergyUsage],
    adjustments: Iterable[Adjustment],
    credits: Iterable[CreditBalance] | Decimal,
    vat_rate: Decimal,
    concessions: Iterable[Concession] = (),
) -> InvoiceDraft:
    """Assemble the invoice of `tenant` for `period`; see the module docstring for the arithmetic.

    `credits` are the tenant's unexpired grant balances (from `credit_balances`), or one
    anonymous Decimal amount; `concessions` the goodwill notes a replacement carries, in
    note order. Raises ValueError for negative seconds or energy, an adjustment that is not
    whole fen, or a negative credit.
    """
    parse_period(period)
    rent = list(rent)
    lines = [*_rent_lines(rent), *_electricity_lines(energy), *_adjustment_lines(adjustments)]
    subtotal = sum((line.amount for line in lines), Decimal("0.00"))
    discounts = _discount_lines(rent)
    lines += discounts
    owed = subtotal + sum((line.amount for line in discounts), Decimal("0.00"))
    for concession, take in concede(tuple(concessions), owed):
        if take:
            lines.append(_flat_line("concession", None, f"Goodwill credit {concession.note}", -take,
                                    credit_id=concession.note))
            owed -= take

    credit_used = Decimal("0.00")
    for balance in _spending_order(credits, period):
        spend = round_fen(min(balance.remaining, max(owed - credit_used, Decimal(0))))
        if spend:
            lines.append(_flat_line("credit", None, balance.reason or "Credit applied", -spend, credit_id=balance.id))
            credit_used += spend
    net = owed - credit_used
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


def credit_balances(grants: Iterable[CreditGrant], used: dict[str, Decimal], period: str) -> list[CreditBalance]:
    """Balances of the grants usable in `period`: amount − what earlier invoices spent of each.

    `used` maps grant id → credit spent so far. A grant whose `expires_period` is before
    `period` is gone, whatever is left of it.
    """
    parse_period(period)
    balances = []
    for grant in grants:
        if grant.expires_period is not None and grant.expires_period < period:
            continue
        left = grant.amount - used.get(grant.id, Decimal(0))
        if left > 0:
            balances.append(CreditBalance(grant.id, grant.reason, round_fen(left), grant.expires_period))
    return balances


def credit_available(grants: Iterable[CreditGrant], used_before: Decimal) -> Decimal:
    """Credit left in one pool: Σ grant amounts − credit used by earlier invoices, never below 0.

    Ignores expiry; `credit_balances` is the per-grant, expiry-aware version.
    """
    granted = sum((g.amount for g in grants), Decimal("0.00"))
    return max(granted - used_before, Decimal("0.00"))


def _spending_order(credits: Iterable[CreditBalance] | Decimal, period: str) -> list[CreditBalance]:
    if isinstance(credits, (Decimal, int)):
        if credits < 0:
            raise ValueError(f"credit available must be ≥ 0, got {credits}")
        return [CreditBalance("credit", "Credit applied", Decimal(credits))] if credits else []
    balances = [b for b in credits if b.expires_period is None or b.expires_period >= period]
    if any(b.remaining < 0 for b in balances):
        raise ValueError("a credit balance must be ≥ 0")
    # Soonest-expiring first so that nothing expires while a longer-lived credit is spent.
    return sorted(balances, key=lambda b: (b.expires_period is None, b.expires_period or "", b.id))


def _discount_lines(usages: list[RentUsage]) -> list[InvoiceLine]:
    # One line per (model, plan, list unit price, discount %): −Σ rent × pct / 100.
    groups: dict[tuple[str, str, Fraction, Decimal], list] = {}
    for usage in usages:
        if not usage.discount_pct:
            continue
        per_hour = unit_price_per_hour(usage.price, usage.per_s)
        group = groups.setdefault((usage.gpu_model, usage.plan, per_hour, usage.discount_pct), [0, Fraction(0)])
        group[0] += usage.seconds
        group[1] -= discount_amount(usage.seconds, usage.price, usage.per_s, usage.discount_pct)
    lines = []
    for (gpu_model, plan, per_hour, pct), (seconds, exact) in sorted(groups.items()):
        if seconds:
            description = f"Contract discount {pct.normalize():f} % on {gpu_model} {plan} rent"
            per_hour_off = discount_amount(S_PER_HOUR, per_hour, S_PER_HOUR, pct)  # one hour at the hourly list price
            lines.append(_gpu_hours_line("discount", gpu_model, plan, description, seconds, -per_hour_off, exact))
    return lines


def _rent_lines(usages: Iterable[RentUsage]) -> list[InvoiceLine]:
    # One line per (model, plan, unit price per GPU-hour); sums stay exact until rounding.
    groups: dict[tuple[str, str, Fraction], list] = {}
    for usage in usages:
        if usage.seconds < 0 or usage.per_s <= 0:
            raise ValueError(f"rent usage needs seconds ≥ 0 and per_s > 0: {usage}")
        per_hour = unit_price_per_hour(usage.price, usage.per_s)
        group = groups.setdefault((usage.gpu_model, usage.plan, per_hour), [0, Fraction(0)])
        group[0] += usage.seconds
        group[1] += rent_amount(usage.seconds, usage.price, usage.per_s)  # at list price: discounts are lines
    lines = []
    for (gpu_model, plan, per_hour), (seconds, exact) in sorted(groups.items()):
        if seconds:
            lines.append(_gpu_hours_line("rent", gpu_model, plan, f"{gpu_model} GPU rent, {plan} plan", seconds,
                                         per_hour, exact))
    return lines


def _gpu_hours_line(kind: str, gpu_model: str, plan: str, description: str, seconds: int,
                    per_hour: Fraction, exact: Fraction) -> InvoiceLine:
    """A rent or discount line: GPU-hours at a unit price per GPU-hour, rounded once."""
    return InvoiceLine(
        kind=kind, gpu_model=gpu_model, plan=plan, site=None, band=None, pue=None, ref_period=None,
        description=description, quantity=round_quantity(gpu_hours(seconds)), unit="GPU-hour",
        unit_price=round_quantity(per_hour), exact_amount=exact, amount=round_fen(exact),
    )


def _electricity_lines(usages: Iterable[EnergyUsage]) -> list[InvoiceLine]:
    # One line per (site, band, tariff, PUE); quantity is billed kWh (after PUE).
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
        exact = energy_amount(energy_mj, pue, tariff)
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
                quantity=round_quantity(billed_kwh(energy_mj, pue)),
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
        line = _flat_line("adjustment", adj.ref_period, adj.description, adj.amount)
        if adj.unit_price is not None:  # it corrects a rent or electricity line: say which
            line = InvoiceLine(
                kind="adjustment", gpu_model=adj.gpu_model, plan=adj.plan, site=adj.site, band=adj.band,
                pue=adj.pue, ref_period=adj.ref_period, description=adj.description,
                quantity=round_quantity(adj.quantity if adj.quantity is not None else Decimal(0)), unit=adj.unit,
                unit_price=round_quantity(adj.unit_price), exact_amount=line.exact_amount, amount=line.amount,
            )
        lines.append(line)
    return lines


def _flat_line(kind: str, ref_period: str | None, description: str, amount: Decimal,
               credit_id: str | None = None) -> InvoiceLine:
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
        credit_id=credit_id,
    )
