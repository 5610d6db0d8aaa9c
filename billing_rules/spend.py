"""Live spend (issue 15): a tenant's exact month-to-date quantities, their money, and the
billing events they call for. Pure.

The stream keeps quantities, never money: rented GPU-seconds per rent terms and IT
millijoules per energy terms, per tenant and billing period (`PeriodSpend`). Money is
computed from them when asked, by the invoice's own function (`billing_rules.invoice.
build_invoice`): the rent, discount and electricity lines of `spend_invoice` are the lines
the monthly run builds from the same seconds, to the fen, because they are built by the
same code from the same groups (a rent line per model, plan and unit price; an electricity
line per site, band, tariff and PUE).

    position(...)    -> TenantPosition   month to date, balance and runway of one tenant now
    due_events(...)  -> [BillingEvent]   every event whose condition holds (level, not edge):
                                         the emitter drops the ids it has already emitted

What the stream cannot know — top-ups, finalized invoices, credits left, late-data
adjustments, the budget, the last hour's burn — comes in a `SpendContext` read from the
warehouse by the caller.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction

from billing_rules.invoice import (
    Adjustment,
    CreditBalance,
    EnergyUsage,
    InvoiceDraft,
    RentUsage,
    build_invoice,
)
from billing_rules.money import round_fen
from schemas.billing_events import BillingEvent

__all__ = ["AlertPolicy", "EnergyTerms", "PeriodSpend", "RentTerms", "SpendContext", "TenantPosition",
           "due_events", "position", "spend_invoice"]

_CENT = Decimal("0.01")
USAGE_KINDS = ("rent", "discount", "electricity")  # the lines of the quantities themselves


@dataclass(frozen=True, slots=True, order=True)
class RentTerms:
    """What one rented GPU-second costs, as the rated row carries it (schemas/tables.py)."""

    gpu_model: str
    plan: str
    list_price: Decimal
    per_s: int
    discount_pct: Decimal


@dataclass(frozen=True, slots=True, order=True)
class EnergyTerms:
    """What one millijoule of IT energy costs at a site in a band."""

    site: str
    band: str
    tariff_per_kwh: Decimal
    pue: Decimal


@dataclass
class PeriodSpend:
    """Exact quantities of one tenant in one period: seconds per rent terms, mJ per energy terms."""

    rent_s: dict[RentTerms, int] = field(default_factory=dict)
    energy_mj: dict[EnergyTerms, int] = field(default_factory=dict)

    def add(self, other: PeriodSpend) -> None:
        """Add `other`'s quantities to these (exact integers: any order gives the same sums)."""
        for terms, seconds in other.rent_s.items():
            self.rent_s[terms] = self.rent_s.get(terms, 0) + seconds
        for terms, mj in other.energy_mj.items():
            self.energy_mj[terms] = self.energy_mj.get(terms, 0) + mj

    def copy(self) -> PeriodSpend:
        return PeriodSpend(dict(self.rent_s), dict(self.energy_mj))

    @property
    def empty(self) -> bool:
        return not any(self.rent_s.values()) and not any(self.energy_mj.values())

    def rent_usages(self) -> list[RentUsage]:
        return [RentUsage(t.gpu_model, t.plan, t.list_price, t.per_s, seconds, t.discount_pct)
                for t, seconds in sorted(self.rent_s.items()) if seconds]

    def energy_usages(self) -> list[EnergyUsage]:
        return [EnergyUsage(t.site, t.band, t.tariff_per_kwh, t.pue, mj)
                for t, mj in sorted(self.energy_mj.items()) if mj]

    @classmethod
    def total(cls, parts: Iterable[PeriodSpend]) -> PeriodSpend:
        whole = cls()
        for part in parts:
            whole.add(part)
        return whole


def spend_invoice(tenant: str, period: str, spend: PeriodSpend, *, vat_rate: Decimal,
                  adjustments: Iterable[Adjustment] = (), credits: Iterable[CreditBalance] | Decimal = Decimal(0)
                  ) -> InvoiceDraft:
    """The invoice of `spend` as the monthly run would build it: without adjustments and
    credits its lines are the invoice's lines before credits, exactly."""
    return build_invoice(tenant, period, spend.rent_usages(), spend.energy_usages(), adjustments, credits, vat_rate)


@dataclass(frozen=True)
class SpendContext:
    """What the warehouse knows of a tenant that the stream does not, as of `period`.

    `base` is top-ups − finalized invoices − estimates of the other periods not invoiced
    (None: the tenant never topped up — it is not prepaid and gets no balance events).
    `invoiced_total` is set when `period` itself is already invoiced (its total then counts).
    """

    tenant: str
    period: str
    vat_rate: Decimal
    base: Decimal | None = None
    budget: Decimal | None = None
    credits: tuple[CreditBalance, ...] = ()
    adjustments: tuple[Adjustment, ...] = ()
    burn_per_hour: Fraction = Fraction(0)  # last hour's charges with VAT, before credits
    invoiced_total: Decimal | None = None


@dataclass(frozen=True)
class TenantPosition:
    """Where a tenant stands now; money in CNY with VAT."""

    tenant: str
    period: str
    month_to_date: Decimal  # the period's invoice total if it ran now (credits, adjustments, VAT)
    before_credits: Decimal  # subtotal + discounts of the usage lines: what the table holds, priced
    budget: Decimal | None
    balance: Decimal | None  # None: not prepaid
    runway_hours: Decimal | None  # None: no burn, or not prepaid


@dataclass(frozen=True)
class AlertPolicy:
    """When billing events are due: budget shares in percent, a low-balance amount, a runway."""

    budget_pct: tuple[int, ...] = (50, 80, 100)
    low_balance: Decimal | None = None
    low_runway_hours: int | None = None

    def __post_init__(self) -> None:
        if any(not 1 <= pct <= 100 for pct in self.budget_pct) or len(set(self.budget_pct)) != len(self.budget_pct):
            raise ValueError("budget thresholds are distinct whole percents from 1 to 100")
        if self.low_balance is not None and (self.low_balance <= 0 or self.low_balance != self.low_balance.quantize(_CENT)):
            raise ValueError("the low-balance amount is positive, with at most two decimals")
        if self.low_runway_hours is not None and not 1 <= self.low_runway_hours <= 99_999:
            raise ValueError("the low-runway threshold is 1 to 99999 hours")


def position(tenant: str, period: str, spend: PeriodSpend, context: SpendContext) -> TenantPosition:
    """`tenant`'s month to date, balance and runway from the live quantities and the context."""
    draft = spend_invoice(tenant, period, spend, vat_rate=context.vat_rate, adjustments=context.adjustments,
                          credits=context.credits)
    before_credits = sum((line.amount for line in draft.lines if line.kind in USAGE_KINDS), Decimal("0.00"))
    mtd = context.invoiced_total if context.invoiced_total is not None else draft.total
    balance = None if context.base is None else context.base - (0 if context.invoiced_total is not None else mtd)
    return TenantPosition(tenant=tenant, period=period, month_to_date=mtd, before_credits=before_credits,
                          budget=context.budget, balance=balance,
                          runway_hours=None if balance is None else runway(balance, context.burn_per_hour))


def runway(balance: Decimal, burn_per_hour: Fraction) -> Decimal | None:
    """Hours `balance` lasts at `burn_per_hour`, rounded down to 0.01 h; 0 when nothing is left; None without burn."""
    if burn_per_hour <= 0:
        return None
    if balance <= 0:
        return Decimal(0).quantize(_CENT)
    return Decimal(math.floor(Fraction(balance) / burn_per_hour * 100)).scaleb(-2)


def due_events(now: TenantPosition, policy: AlertPolicy, observed_at: str) -> list[BillingEvent]:
    """Every billing event whose condition holds for `now`; the caller emits those not emitted yet.

    budget_threshold pct   month to date ≥ budget × pct / 100 (a budget above zero)
    balance_low amount:A   0 < balance < A
    balance_low runway:Nh  0 < balance and runway < N hours
    balance_exhausted 0    balance ≤ 0
    """
    money = {"spend": str(round_fen(now.month_to_date))}
    if now.budget is not None:
        money["budget"] = str(round_fen(now.budget))
    if now.balance is not None:
        money["balance"] = str(round_fen(now.balance))
    due = []

    def event(kind: str, threshold: str) -> None:
        due.append(BillingEvent(kind=kind, tenant=now.tenant, period=now.period, threshold=threshold,
                                observed_at=observed_at, **money))

    if now.budget is not None and now.budget > 0:
        for pct in sorted(policy.budget_pct):
            if now.month_to_date * 100 >= now.budget * pct:
                event("budget_threshold", str(pct))
    if now.balance is not None:
        if now.balance <= 0:
            event("balance_exhausted", "0")
        else:
            if policy.low_balance is not None and now.balance < policy.low_balance:
                event("balance_low", f"amount:{policy.low_balance.quantize(_CENT)}")
            if (policy.low_runway_hours is not None and now.runway_hours is not None
                    and now.runway_hours < policy.low_runway_hours):
                event("balance_low", f"runway:{policy.low_runway_hours}h")
    return due


def merge_totals(parts: Mapping[object, Mapping[str, PeriodSpend]]) -> dict[str, PeriodSpend]:
    """Per period, the sum of every source's quantities (a tenant's cards span partitions)."""
    periods: dict[str, PeriodSpend] = {}
    for by_period in parts.values():
        for period, spend in by_period.items():
            periods.setdefault(period, PeriodSpend()).add(spend)
    return periods
