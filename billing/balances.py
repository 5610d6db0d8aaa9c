"""Prepaid balances and monthly budgets (migration 0016; docs/balances.md).

    top_up(db, tenant, amount, ref, *, note="", now=None) -> (TopUp, bool)
    set_budget(db, tenant, amount | None, *, note="", now=None) -> Budget
    balance(db, rules, tenant, *, now=None) -> Balance

The balance of a tenant, in CNY with VAT:

    balance = top-ups + payments − refunds + write-offs − totals of its issued invoices + its credit notes
              − estimates of its periods not yet invoiced

(payments not reversed; issue 38: it is the tenant's unapplied credit less what it owes).

An invoice's total already has its credits, discounts and VAT applied. The estimate of a
period is the invoice the monthly run would build for it now (billing.invoicing.draft_invoice,
through billing.current_usage for the current period): the same rated source, late-data
adjustments, credits and VAT. A period that has ended but is not invoiced yet (inside the
grace period, or the run has not happened) is estimated exactly like the current one and
listed with ``closed=True``; the run replaces its estimate by the invoice's total.

The burn rate is what the tenant's rated seconds of the last hour, [now − 3600 s, now),
cost at the price terms they were rated with (rent with the contract discount each second
carries, electricity with its PUE and tariff; billing_rules.pricing), with the period's VAT,
before credits — so while a credit is left it overstates the burn, and the runway (balance /
burn rate, in hours, rounded down) errs on the short side. Only per-second rows are read:
`rated_seconds` keeps the recent hours whatever the rollups did.

Money is Decimal, never float: an amount is read from text by `parse_amount` (digits, at
most two decimals, positive, at most MAX_AMOUNT; no sign, exponent, NaN or Infinity).

    BillingError                     (billing/errors.py)
    ├── NotFound                     the tenant is not registered
    └── BalanceRefused               base of this module's refusals
        ├── InvalidAmount            an amount that is not a positive sum of at most two decimals
        ├── InvalidRef               a ref outside the id syntax
        └── RefConflict              a ref already recorded with another tenant or amount
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

from billing import books
from billing.current_usage import current_usage
from billing.errors import BillingError, NotFound
from billing.invoice_store import charged
from billing.invoicing import draft_invoice
from billing.tenants import shown_value, utc_ms, check_note, check_tenant_id, find_tenant, list_tenants
from billing_rules import energy_amount, rent_amount, round_fen
from schemas.books import BudgetRow, BudgetSet, TopUpRecorded, TopUpRow
from schemas.ids import is_id

__all__ = ["MAX_AMOUNT", "Balance", "BalanceRefused", "Budget", "InvalidAmount", "InvalidRef", "PeriodEstimate", "has_top_ups",
           "RefConflict", "TopUp", "balance", "balance_of_all", "burn_per_hour", "burn_per_hour_by_tenant", "check_ref", "find_budget", "ledger", "parse_amount", "set_budget", "top_up"]

MAX_AMOUNT = Decimal("100000000.00")  # ¥100 million: one top-up or budget above it is a typo
_AMOUNT = re.compile(r"[0-9]{1,12}(\.[0-9]{1,2})?")  # ASCII digits only: \d would take "１００"
_CENT = Decimal("0.01")


class BalanceRefused(BillingError):
    """Base of the refusals of balances and budgets: the message says what to change."""


class InvalidAmount(BalanceRefused):
    """An amount that is not digits with at most two decimals, positive and at most MAX_AMOUNT."""


class InvalidRef(BalanceRefused):
    """A top-up ref outside the id syntax (schemas/ids.py)."""


class RefConflict(BalanceRefused):
    """A ref already recorded for another tenant or another amount: a reused or mistyped reference."""


@dataclass(frozen=True)
class TopUp:
    """One row of the ledger."""

    ref: str
    tenant: str
    amount: Decimal  # CNY, > 0
    note: str
    created_at: datetime  # UTC


@dataclass(frozen=True)
class Budget:
    """A tenant's monthly budget, as its latest row says; amount None: no budget."""

    tenant: str
    amount: Decimal | None  # CNY per billing period, with VAT
    note: str
    updated_at: datetime  # UTC


@dataclass(frozen=True)
class PeriodEstimate:
    """The estimated total of one period with usage that is not invoiced yet."""

    period: str
    total: Decimal  # with credits and VAT, as the invoice would be now
    closed: bool  # the period has ended: its invoice run is due (after the grace period) or pending


@dataclass(frozen=True)
class Balance:
    """A tenant's prepaid balance at `at`; money in CNY, with VAT."""

    tenant: str
    at: datetime  # UTC
    period: str  # the billing period containing `at`
    top_ups: Decimal  # sum of the ledger
    invoiced: Decimal  # sum of the totals of its issued (and voided) invoices less their credit notes
    invoices: int  # how many periods have an issued invoice
    estimates: tuple[PeriodEstimate, ...]  # periods not invoiced yet, oldest first
    estimated: Decimal  # sum of their totals
    balance: Decimal  # top_ups − invoiced − estimated
    month_to_date: Decimal  # the current period's total: its invoice, or its estimate
    budget: Decimal | None  # None: no budget
    budget_used: Decimal | None  # month_to_date / budget, 4 decimals (0.8125 = 81.25 %); None without a budget
    burn_per_hour: Decimal  # last hour's charges with VAT, to the fen
    runway_hours: Decimal | None  # balance / burn, 2 decimals rounded down; 0 when balance ≤ 0; None: no burn
    payments: Decimal = Decimal("0.00")  # payments other than top-ups, not reversed (issue 38)
    refunded: Decimal = Decimal("0.00")  # credit paid back out of band
    written_off: Decimal = Decimal("0.00")  # invoices' amounts marked uncollectible (less recoveries)

    @property
    def prepaid(self) -> bool:
        """True when the tenant has topped up (billing/settlement.py: its invoices are settled from
        the balance); a postpaid tenant's balance is only ever what it is charged, negative."""
        return self.top_ups > 0

    @property
    def owed(self) -> Decimal:
        """What a postpaid tenant is charged: its issued invoices (less their credit notes) and the
        estimates not invoiced yet, less its payments (issue 38) — the balance's opposite, never below
        zero; 0 for a prepaid tenant (what it lacks shows as its negative balance)."""
        return Decimal(0) if self.prepaid else max(-self.balance, Decimal(0))


# ------------------------------------------------------------------------- checks (pure)


def parse_amount(value: object, what: str = "amount") -> Decimal:
    """`value` (text or Decimal) as a Decimal of CNY with two decimals; InvalidAmount, one line, if not
    digits with at most two decimals, above zero and at most MAX_AMOUNT. Floats are refused: they
    are not money."""
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise InvalidAmount(f"{what} {value} is not a number of yuan")
        text = format(value, "f")
    elif isinstance(value, str):
        text = value  # as given: a blank, a newline or a sign is not part of an amount
    else:
        raise InvalidAmount(f"{what} must be given as text or Decimal, not {type(value).__name__}")
    if not _AMOUNT.fullmatch(text):
        raise InvalidAmount(f"{what} {shown_value(text)} is not an amount of yuan: digits with at most two decimals, "
                            "like 500 or 99.50 (no sign, exponent, separators, NaN or Infinity)")
    amount = Decimal(text).quantize(_CENT)
    if amount <= 0:
        raise InvalidAmount(f"{what} {text} must be above zero")
    if amount > MAX_AMOUNT:
        raise InvalidAmount(f"{what} {text} is above the cap of {MAX_AMOUNT} per entry")
    return amount


def check_ref(value: object) -> str:
    """`value` when it is a ref in the id syntax; InvalidRef with a one-line reason if not."""
    if is_id(value):
        return value  # type: ignore[return-value]
    shown = shown_value(value) if isinstance(value, str) else type(value).__name__
    raise InvalidRef(f"ref {shown} is not an id: an ASCII letter or digit, then up to 63 letters, digits, "
                     "'.', '_' or '-' (a payment reference such as pay-2026-0001)")


def _registered(db: Any, tenant: str) -> str:
    tenant = check_tenant_id(tenant)
    if find_tenant(db, tenant) is None:
        raise NotFound(f"tenant {tenant} is not registered; register it with `gpubill tenant add {tenant} --name NAME`")
    return tenant


# ------------------------------------------------------------------------- ledger and budgets

_LEDGER_COLUMNS = ("ref", "tenant", "amount", "note", "created_at")
_BUDGET_COLUMNS = ("tenant", "amount", "note", "updated_at")


def top_up(db: Any, tenant: str, amount: Decimal | str, ref: str, *, note: str = "",
           now: datetime | None = None, rules: Any = None) -> tuple[TopUp, bool]:
    """Record a top-up of `amount` CNY for registered `tenant`; returns (the entry, whether this call wrote it).

    A top-up is a payment held as credit (issue 38; billing/payments.py): received today in the
    billing time zone, allocated to the tenant's outstanding invoices oldest due date first, the
    rest spent on its next invoices. Given no `rules` (tests of balances alone) it is recorded as
    credit received on its UTC date, allocated to nothing.

    Idempotent by `ref`: the same ref with the same tenant and amount changes nothing (the note
    is not compared) and returns the recorded entry with False; the same ref with another tenant
    or amount — or a payment's ref — is RefConflict, and nothing is written."""
    amount, ref, note = parse_amount(amount), check_ref(ref), check_note(note)
    tenant = _registered(db, tenant)
    rows = db.query(f"SELECT {', '.join(_LEDGER_COLUMNS)} FROM balance_ledger FINAL WHERE ref = {{r:String}}",
                    {"r": ref})
    if rows:
        recorded = _top_up(rows[0])
        if (recorded.tenant, recorded.amount) == (tenant, amount):
            return recorded, False
        raise RefConflict(f"ref {ref} is already recorded as a top-up of {recorded.amount} for {recorded.tenant}; "
                          "nothing was written (give the payment's own reference)")
    if db.query("SELECT count() FROM payments FINAL WHERE ref = {r:String}", {"r": ref})[0][0]:
        raise RefConflict(f"ref {ref} is already recorded as a payment (`gpubill payment show {ref}`); nothing was "
                          "written (give the top-up's own reference)")
    entry = TopUp(ref, tenant, amount, note, utc_ms(now))
    row = TopUpRow(**{c: getattr(entry, c) for c in _LEDGER_COLUMNS})
    if rules is None:
        books.record(db, TopUpRecorded(kind="top_up", top_up=row))
        return entry, True
    from billing.accounts import today
    from billing.payments import record_payment

    record_payment(db, rules, tenant, amount, ref, today(rules, entry.created_at), method="other", note=note,
                   source="top_up", now=entry.created_at, top_up=row)
    return entry, True


def has_top_ups(db: Any, tenant: str) -> bool:
    """True when `tenant` has a top-up in the ledger: it is prepaid (billing/settlement.py), its
    invoices are settled from the balance and a credit note returns to it; else postpaid."""
    ((count,),) = db.query("SELECT count() FROM balance_ledger FINAL WHERE tenant = {t:String}", {"t": tenant})
    return int(count) > 0


def ledger(db: Any, tenant: str) -> list[TopUp]:
    """`tenant`'s top-ups, oldest first."""
    rows = db.query(f"SELECT {', '.join(_LEDGER_COLUMNS)} FROM balance_ledger FINAL WHERE tenant = {{t:String}} "
                    "ORDER BY created_at, ref", {"t": check_tenant_id(tenant)})
    return [_top_up(row) for row in rows]


def set_budget(db: Any, tenant: str, amount: Decimal | str | None, *, note: str = "",
               now: datetime | None = None) -> Budget:
    """Make `amount` CNY per period (None: no budget) registered `tenant`'s budget; the latest wins."""
    checked = None if amount is None else parse_amount(amount, "budget")
    note = check_note(note)
    tenant = _registered(db, tenant)
    at = utc_ms(now)
    existing = find_budget(db, tenant)
    if existing is not None:  # strictly later than the row it replaces, so it wins even within a millisecond
        at = max(at, existing.updated_at + timedelta(milliseconds=1))
    budget = Budget(tenant, checked, note, at)
    books.record(db, BudgetSet(kind="budget_set", budget=BudgetRow(**{c: getattr(budget, c) for c in _BUDGET_COLUMNS})))
    return budget


def find_budget(db: Any, tenant: str) -> Budget | None:
    """`tenant`'s latest budget row, or None when it never had one."""
    rows = db.query(f"SELECT {', '.join(_BUDGET_COLUMNS)} FROM budgets FINAL WHERE tenant = {{t:String}}",
                    {"t": check_tenant_id(tenant)})
    if not rows:
        return None
    tenant, amount, note, updated = rows[0]
    return Budget(tenant, None if amount is None else Decimal(amount), note, utc_ms(updated))


def _top_up(row: Any) -> TopUp:
    ref, tenant, amount, note, created = row
    return TopUp(ref, tenant, Decimal(amount), note, utc_ms(created))


# ------------------------------------------------------------------------- the balance

# Payments (issue 38) not reversed — top-ups apart, they make a tenant prepaid — refunds paid out, write-offs.
_TOTALS_SQL = """
SELECT
    (SELECT sumIf(amount, source = 'top_up') FROM payments FINAL WHERE tenant = {t:String}
        AND ref NOT IN (SELECT ref FROM payment_reversals FINAL WHERE tenant = {t:String})),
    (SELECT sumIf(amount, source != 'top_up') FROM payments FINAL WHERE tenant = {t:String}
        AND ref NOT IN (SELECT ref FROM payment_reversals FINAL WHERE tenant = {t:String})),
    (SELECT sum(amount) FROM refunds FINAL WHERE tenant = {t:String}),
    (SELECT sum(amount) FROM write_offs FINAL WHERE tenant = {t:String})
"""
# Periods with rated usage of the tenant: rollups and the per-second rows (retention may have
# dropped either). Uninvoiced ones among them are estimated.
_USAGE_PERIODS_SQL = (
    "SELECT DISTINCT period FROM rated_hours WHERE tenant = {t:String} "
    "UNION DISTINCT SELECT DISTINCT period FROM rated_seconds WHERE tenant = {t:String}"
)
_LAST_HOUR_SQL = """
SELECT period, stream, rent_price, rent_per_s, discount_pct, tariff_per_kwh, pue, count() AS n, sum(energy_mj) AS mj
FROM rated_seconds FINAL
WHERE tenant = {t:String} AND second >= toDateTime({lo:UInt32}, 'UTC') AND second < toDateTime({hi:UInt32}, 'UTC')
GROUP BY period, stream, rent_price, rent_per_s, discount_pct, tariff_per_kwh, pue
"""


def balance(db: Any, rules: Any, tenant: str, *, now: datetime | None = None) -> Balance:
    """Registered `tenant`'s balance at `now` (default: the clock); reads only."""
    tenant = _registered(db, tenant)
    at = utc_ms(now)
    now_s = int(at.timestamp())
    period = rules.period_of(now_s)
    (topped, paid, refunded, written), = db.query(_TOTALS_SQL, {"t": tenant})
    top_ups = Decimal(topped or 0).quantize(_CENT)  # "0.00" when there are none, like every amount
    paid, refunded, written = (Decimal(v or 0).quantize(_CENT) for v in (paid, refunded, written))
    invoiced_by_period = charged(db, tenant).get(tenant, {})  # with VAT, less credit notes
    invoiced = sum(invoiced_by_period.values(), Decimal("0.00"))

    current = current_usage(db, rules, tenant, now=at)
    pending = {p for (p,) in db.query(_USAGE_PERIODS_SQL, {"t": tenant})} - set(invoiced_by_period) - {period}
    estimates = [PeriodEstimate(p, draft_invoice(db, rules, tenant, p).total, closed=p < period)
                 for p in sorted(pending)]
    if not current.invoiced:
        estimates.append(PeriodEstimate(period, current.estimated_total, closed=False))
    estimates.sort(key=lambda e: e.period)
    estimated = sum((e.total for e in estimates), Decimal("0.00"))
    remaining = top_ups + paid - refunded + written - invoiced - estimated

    budget = find_budget(db, tenant)
    budget_amount = budget.amount if budget else None
    used = None if budget_amount is None else (current.estimated_total / budget_amount).quantize(Decimal("0.0001"))
    burn = burn_per_hour(db, rules, tenant, now_s)
    return Balance(
        tenant=tenant, at=at, period=period, top_ups=top_ups, invoiced=invoiced, invoices=len(invoiced_by_period),
        estimates=tuple(estimates), estimated=estimated, balance=remaining, month_to_date=current.estimated_total,
        budget=budget_amount, budget_used=used, burn_per_hour=round_fen(burn), runway_hours=_runway(remaining, burn),
        payments=paid, refunded=refunded, written_off=written,
    )


_LAST_HOUR_ALL_SQL = """
SELECT tenant, period, stream, rent_price, rent_per_s, discount_pct, tariff_per_kwh, pue, count() AS n, sum(energy_mj) AS mj
FROM rated_seconds FINAL
WHERE tenant != '' AND second >= toDateTime({lo:UInt32}, 'UTC') AND second < toDateTime({hi:UInt32}, 'UTC')
GROUP BY tenant, period, stream, rent_price, rent_per_s, discount_pct, tariff_per_kwh, pue
"""


def burn_per_hour_by_tenant(db: Any, rules: Any, now_s: int) -> dict[str, Fraction]:
    """`burn_per_hour` of every tenant with rated seconds in [now − 3600 s, now), in one scan."""
    burns: dict[str, Fraction] = {}
    for tenant, period, stream, price, per_s, pct, tariff, pue, n, mj in db.query(
            _LAST_HOUR_ALL_SQL, {"lo": now_s - 3600, "hi": now_s}):
        charge = rent_amount(int(n), price, int(per_s), pct) if stream == "rent" else energy_amount(int(mj), pue, tariff)
        burns[tenant] = burns.get(tenant, Fraction(0)) + charge * (1 + Fraction(rules.vat_rate(period)))
    return burns


def burn_per_hour(db: Any, rules: Any, tenant: str, now_s: int) -> Fraction:
    """Exact charges of `tenant`'s rated seconds in [now − 3600 s, now), each period's VAT added."""
    burn = Fraction(0)
    for period, stream, price, per_s, pct, tariff, pue, n, mj in db.query(
            _LAST_HOUR_SQL, {"t": tenant, "lo": now_s - 3600, "hi": now_s}):
        charge = rent_amount(int(n), price, int(per_s), pct) if stream == "rent" else energy_amount(int(mj), pue, tariff)
        burn += charge * (1 + Fraction(rules.vat_rate(period)))
    return burn


def _runway(remaining: Decimal, burn_per_hour: Fraction) -> Decimal | None:
    """Hours `remaining` lasts at `burn_per_hour`, rounded down to 0.01 h; 0 when nothing is left; None without burn."""
    if burn_per_hour <= 0:
        return None
    if remaining <= 0:
        return Decimal(0).quantize(_CENT)
    hundredths = math.floor(Fraction(remaining) / burn_per_hour * 100)  # exact, then down
    return Decimal(hundredths).scaleb(-2)


def balance_of_all(db: Any, rules: Any, *, now: datetime | None = None) -> list[Balance]:
    """The balance of every registered tenant, by id."""
    return [balance(db, rules, t.tenant, now=now) for t in list_tenants(db)]

