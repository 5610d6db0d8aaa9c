"""The warehouse's side of live spend (issue 15; docs/balances.md, "Live spend").

    SpendContexts.read(db, rules)  per registered tenant, what the stream cannot know: top-ups,
                                   issued invoices less credit notes, estimates of other open periods, budget,
                                   credits left, pending late-data adjustments, last hour's burn
    store_positions(db, …)         the tracker's positions into `live_spend` (migration 0018)
    live_position(db, tenant, …)   the newest stored position of a tenant while it is fresh

The stream holds the current period's exact quantities; everything else of the balance
(docs/balances.md: top-ups − issued invoices + credit notes − estimates) is read here, every few seconds
(GPUBILL_SPEND_CONTEXT_S), by each worker for the tracker it runs. Estimates of *other*
periods not yet invoiced (a closed month inside its grace period) read a whole month of
rated data, so they are reused for `ESTIMATE_TTL_S`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

from billing.balances import burn_per_hour_by_tenant
from billing.invoice_store import charged
from billing.invoicing import draft_invoice, invoice_credits, late_periods, pending_adjustments
from billing.tenants import list_tenants, trial_tenants, utc_ms
from billing_rules.spend import SpendContext, TenantPosition

__all__ = ["ESTIMATE_TTL_S", "LivePosition", "SpendContexts", "live_position", "store_positions"]

ESTIMATE_TTL_S = 300.0
BURN_TTL_S = 60.0  # the last hour's burn moves slowly; its scan of the hour's rows is the costly read
_TOP_UPS_SQL = "SELECT tenant, sum(amount) FROM balance_ledger FINAL GROUP BY tenant"
_BUDGETS_SQL = "SELECT tenant, amount FROM budgets FINAL"
# Other periods with usage: from the rollups only (small; a closed period is rolled up within
# minutes of its end). The per-second rows of a month are billions at the operator's size,
# too many to scan every few seconds.
_USAGE_PERIODS_SQL = "SELECT DISTINCT tenant, period FROM rated_hours WHERE period != {p:String} AND tenant != ''"
_COLUMNS = ("tenant", "period", "month_to_date", "before_credits", "budget", "balance", "runway_hours", "as_of")


@dataclass
class SpendContexts:
    """Reads the contexts; keeps the estimates of other open periods for ESTIMATE_TTL_S."""

    ttl_s: float = ESTIMATE_TTL_S
    burn_ttl_s: float = BURN_TTL_S
    _estimates: dict[tuple[str, str], tuple[float, Decimal]] = field(default_factory=dict)
    _burns: tuple[float, dict[str, Fraction]] | None = None

    def read(self, db: Any, rules: Any, *, now: datetime | None = None) -> dict[str, SpendContext]:
        """Every registered tenant's context for the period of `now` (default: the clock)."""
        at = utc_ms(now)
        period = rules.period_of(int(at.timestamp()))
        vat = rules.vat_rate(period)
        top_ups = {tenant: Decimal(total) for tenant, total in db.query(_TOP_UPS_SQL)}
        invoiced = charged(db)  # tenant → period → with VAT, less credit notes
        budgets = {tenant: None if amount is None else Decimal(amount) for tenant, amount in db.query(_BUDGETS_SQL)}
        open_periods: dict[str, set[str]] = {}
        for tenant, used_period in db.query(_USAGE_PERIODS_SQL, {"p": period}):
            open_periods.setdefault(tenant, set()).add(used_period)
        late = late_periods(db, period)
        trial = trial_tenants(db)
        burns = self._burns_now(db, rules, int(at.timestamp()))
        contexts = {}
        for registered in list_tenants(db):
            tenant = registered.tenant
            done = invoiced.get(tenant, {})
            base = None
            if tenant in top_ups:
                others = sorted(open_periods.get(tenant, set()) - set(done))
                estimated = sum((self._estimate(db, rules, tenant, p) for p in others), Decimal(0))
                base = top_ups[tenant] - sum(done.values(), Decimal(0)) - estimated
            contexts[tenant] = SpendContext(
                tenant=tenant, period=period, vat_rate=vat, base=base, budget=budgets.get(tenant),
                credits=tuple(invoice_credits(db, rules, tenant, period, new_tenant=tenant in trial)),
                adjustments=tuple(pending_adjustments(db, rules, tenant, period, late[tenant])) if tenant in late else (),
                burn_per_hour=burns.get(tenant, Fraction(0)), invoiced_total=done.get(period),
            )
        return contexts

    def _burns_now(self, db: Any, rules: Any, now_s: int) -> dict[str, Fraction]:
        if self._burns is None or time.monotonic() - self._burns[0] >= self.burn_ttl_s:
            self._burns = (time.monotonic(), burn_per_hour_by_tenant(db, rules, now_s))
        return self._burns[1]

    def _estimate(self, db: Any, rules: Any, tenant: str, period: str) -> Decimal:
        cached = self._estimates.get((tenant, period))
        if cached is not None and time.monotonic() - cached[0] < self.ttl_s:
            return cached[1]
        total = draft_invoice(db, rules, tenant, period).total
        self._estimates[(tenant, period)] = (time.monotonic(), total)
        return total


@dataclass(frozen=True)
class LivePosition:
    """A stored position: money in CNY with VAT; `as_of` when the tracker priced it."""

    tenant: str
    period: str
    month_to_date: Decimal
    before_credits: Decimal
    budget: Decimal | None
    balance: Decimal | None
    runway_hours: Decimal | None
    as_of: datetime


def store_positions(db: Any, positions: list[tuple[str, tuple[TenantPosition, int]]]) -> int:
    """Write the tracker's positions ((tenant, (position, as of ms))); returns the rows written."""
    rows = []
    for tenant, (where, as_of_ms) in positions:
        rows.append((tenant, where.period, where.month_to_date, where.before_credits, where.budget, where.balance,
                     where.runway_hours, datetime.fromtimestamp(as_of_ms / 1000, UTC)))
    if rows:
        db.insert("live_spend", rows, _COLUMNS)
    return len(rows)


def live_position(db: Any, tenant: str, *, max_age_s: float = 60.0, now: datetime | None = None) -> LivePosition | None:
    """`tenant`'s newest stored position if it is at most `max_age_s` old, else None."""
    rows = db.query(f"SELECT {', '.join(_COLUMNS)} FROM live_spend FINAL WHERE tenant = {{t:String}}", {"t": tenant})
    if not rows:
        return None
    tenant, period, mtd, before, budget, balance, runway, as_of = rows[0]
    as_of = utc_ms(as_of)
    if utc_ms(now) - as_of > timedelta(seconds=max_age_s):
        return None
    return LivePosition(tenant, period, Decimal(mtd), Decimal(before), _optional(budget), _optional(balance),
                        _optional(runway), as_of)


def _optional(value: Any) -> Decimal | None:
    return None if value is None else Decimal(value)
