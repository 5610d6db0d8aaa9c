"""Month-to-date figures for one tenant: what the web page's summary and chart show.

    current_usage(db, rules, tenant, now=None) -> CurrentUsage     the period containing `now`
    daily_usage(db, rules, tenant, period)     -> list[DailyUsage] one entry per day of the period

The estimate is the invoice the monthly run would build if it ran now
(`billing.invoicing.draft_invoice`: the same rated source — rollups plus the seconds written
since — the same late-data adjustments, credits, contract discounts and VAT, priced by
`billing_rules.build_invoice`), and nothing is written. Once the period is invoiced the
figures are the stored invoice's and ``invoiced`` is True.

How the invoice's lines map onto the fields, so that
``rent + electricity - credits + vat == estimated_total`` exactly:

- ``rent``: rent lines, plus the contract's discount lines (negative), plus adjustments for
  late rent of earlier periods; ``electricity``: electricity lines plus late-electricity
  adjustments; ``credits``: what credit lines take off (≥ 0);
- ``gpu_hours`` and ``kwh``: the quantities of this period's rent and electricity lines
  (each rounded to six decimals on its line; adjustments for earlier periods are not this
  period's usage).

Day sums in `daily_usage` are rounded once per day (to the fen, six decimals for hours), so
they may differ from the invoice, which rounds once per line, by a few fen.
"""

from __future__ import annotations

import calendar
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from fractions import Fraction
from typing import Any

from billing.invoicing import draft_invoice, load_invoice
from billing_rules import InvoiceDraft, energy_amount, gpu_hours, rent_amount, round_fen, round_quantity
from usage.rated import rated_source

__all__ = ["CurrentUsage", "DailyUsage", "current_usage", "daily_usage"]


@dataclass(frozen=True)
class CurrentUsage:
    """One tenant's period-to-date figures; money in CNY, rounded as the invoice rounds."""

    tenant: str
    period: str  # the billing period containing `now`, "2026-03"
    gpu_hours: Decimal
    kwh: Decimal  # billed, after PUE
    rent: Decimal  # after contract discounts
    electricity: Decimal
    credits: Decimal  # applied this period (>= 0, shown as a deduction)
    vat: Decimal
    estimated_total: Decimal  # with VAT, as the invoice would compute it now
    newest_data_at: datetime | None  # time of the newest rated second included (UTC); None: no data
    invoiced: bool
    invoice_number: str | None  # estimate until the period is invoiced


@dataclass(frozen=True)
class DailyUsage:
    """One day (billing time zone) of one tenant's usage; spend = rent + electricity, before credits and VAT."""

    day: str  # "2026-03-05"
    gpu_hours: Decimal
    rent: Decimal
    electricity: Decimal
    spend: Decimal


def _figures(tenant: str, period: str, inv: InvoiceDraft) -> dict[str, Any]:
    # money with two decimals, quantities with six, also when there is none: "0.00", "0.000000"
    hours, kwh = Decimal("0.000000"), Decimal("0.000000")
    rent, electricity, credits = Decimal("0.00"), Decimal("0.00"), Decimal("0.00")
    for line in inv.lines:
        if line.kind == "rent":
            hours += line.quantity
            rent += line.amount
        elif line.kind == "discount":
            rent += line.amount
        elif line.kind == "electricity":
            kwh += line.quantity
            electricity += line.amount
        elif line.kind in ("credit", "concession"):  # a concession: a goodwill note a replacement carries
            credits -= line.amount
        elif line.site:  # an adjustment for late electricity of an earlier period
            electricity += line.amount
        else:  # an adjustment for late rent (or its discount) of an earlier period
            rent += line.amount
    return dict(tenant=tenant, period=period, gpu_hours=hours, kwh=kwh, rent=rent, electricity=electricity,
                credits=credits, vat=inv.tax, estimated_total=inv.total)


_INVOICED_SQL = ("SELECT number FROM invoices FINAL WHERE tenant = {t:String} AND period = {p:String} "
                 "AND status = 'issued'")
_NEWEST_HOUR_SQL = "SELECT toUnixTimestamp(max(hour)), count() FROM {source}"
_NEWEST_SECOND_SQL = (
    "SELECT toUnixTimestamp(max(second)), count() FROM rated_seconds "
    "WHERE period = {period:String} AND tenant = {tenant:String} "
    "AND second >= toDateTime({lo:UInt32}, 'UTC') AND second < toDateTime({hi:UInt32}, 'UTC')"
)


def newest_data_at(db: Any, rules: Any, tenant: str, period: str, *,
                   source: tuple[str, dict] | None = None) -> datetime | None:
    """The newest rated second of `tenant` in `period` (UTC), None when there is none.

    The source's newest hour first (rollups are per hour), then that hour's seconds; when
    retention has dropped them, the hour's last second. `source`: the tenant's `rated_source`."""
    source, params = source or rated_source(db, rules, period, tenant)
    hour_s, n = db.query(_NEWEST_HOUR_SQL.format(source=source), params)[0]
    if not int(n):
        return None
    second_s, found = db.query(_NEWEST_SECOND_SQL, {"period": period, "tenant": tenant,
                                                    "lo": int(hour_s), "hi": int(hour_s) + 3600})[0]
    newest = int(second_s) if int(found) else int(hour_s) + 3599
    return datetime.fromtimestamp(newest, timezone.utc)


def current_usage(db: Any, rules: Any, tenant: str, *, now: datetime | None = None) -> CurrentUsage:
    """`tenant`'s figures for the billing period containing `now` (default: the clock); reads only."""
    now = now or datetime.now(timezone.utc)
    period = rules.period_of(int(now.timestamp()))
    source = rated_source(db, rules, period, tenant)  # read once: the figures and the newest second
    rows = db.query(_INVOICED_SQL, {"t": tenant, "p": period})
    if rows:
        inv: InvoiceDraft = load_invoice(db, tenant, period, drafts=False)
        number: str | None = str(rows[0][0])
    else:
        inv, number = draft_invoice(db, rules, tenant, period, source=source), None
    newest = newest_data_at(db, rules, tenant, period, source=source)
    return CurrentUsage(**_figures(tenant, period, inv), newest_data_at=newest, invoiced=number is not None,
                        invoice_number=number)


_DAILY_SQL = """
SELECT toString(day) AS day_text, stream, rent_price, rent_per_s, discount_pct, tariff_per_kwh, pue,
       sum(seconds) AS n, sum(energy_mj) AS mj
FROM {source}
GROUP BY day_text, stream, rent_price, rent_per_s, discount_pct, tariff_per_kwh, pue
"""


def daily_usage(db: Any, rules: Any, tenant: str, period: str) -> list[DailyUsage]:
    """Every day of `period` in order, zeros for days without usage; each figure exact, rounded once per day."""
    rules.period_bounds(period)  # validates the period
    source, params = rated_source(db, rules, period, tenant)
    seconds: dict[str, int] = defaultdict(int)
    rent: dict[str, Fraction] = defaultdict(Fraction)
    cost: dict[str, Fraction] = defaultdict(Fraction)
    for day, stream, price, per_s, pct, tariff, pue, n, mj in db.query(_DAILY_SQL.format(source=source), params):
        if stream == "rent":
            seconds[day] += int(n)
            rent[day] += rent_amount(int(n), price, int(per_s), pct)
        else:
            cost[day] += energy_amount(int(mj), pue, tariff)
    year, month = (int(part) for part in period.split("-"))
    days = [f"{year:04d}-{month:02d}-{d:02d}" for d in range(1, calendar.monthrange(year, month)[1] + 1)]
    out = []
    for day in days:
        r, e = round_fen(rent.get(day, Fraction(0))), round_fen(cost.get(day, Fraction(0)))
        out.append(DailyUsage(day=day, gpu_hours=round_quantity(gpu_hours(seconds.get(day, 0))), rent=r,
                              electricity=e, spend=r + e))
    return out
