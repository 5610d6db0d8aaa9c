"""Build a customer's usage report (SPEC §6, `reports.usage_model`): per day or hour, instance and GPU.

Only rows of the asked tenant are read (the source's WHERE clause is the tenant boundary,
and the rollups are ordered tenant first, so a month reads only the tenant's own granules),
so a tenant never sees another tenant's data.

One truth with the invoice (SPEC §5 "Documents agree"): the same rated rows are handed to
`billing_rules.build_invoice` — the invoice's own grouping, exact sums and rounding, once
per line — and the report's `lines` are its rent, discount and electricity lines. The rows
are then shared out of those line totals by `billing_rules.money.apportion`: each row is
its exact amount (after the contract discount) rounded down or up to the fen, its GPU-hours
and kWh to 1e-6, so that the rows of every format add up to the invoice's lines exactly,
before credits, and no row is more than one fen (one millionth) from its exact value.
Daily and hourly reports share out the same totals.

Each row's IT energy (before PUE) is graded (SPEC §4): `measured_it_kwh` came from the cards'
energy counters, `estimated_it_kwh` from power_w × 1 s. Each is shared out of its own exact
total rounded half up to 1e-6 kWh, the same way, so the rows add up to the totals.

Hourly rows come from the rated source's own grain (one row per UTC hour: `usage.rated`),
so they cost no more to read than daily ones; an hour is named by its start in the billing
time zone, ``2026-03-05T14:00:00+08:00``.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timezone
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from typing import Any

from billing_rules import (
    MJ_PER_KWH,
    EnergyUsage,
    InvoiceLine,
    RentUsage,
    billed_kwh,
    build_invoice,
    energy_amount,
    gpu_hours,
    rent_amount,
    round_quantity,
)
from billing_rules.money import apportion
from reports.usage_model import GRANULARITIES, UsageReport, UsageRow
from usage.by_tenant import plain
from usage.rated import rated_source

_SQL = """
SELECT toString(day) AS day_text, {hour} AS hour_s, instance, gpu_uuid, gpu_model, stream,
       plan, rent_price, rent_per_s, discount_pct, site, band, tariff_per_kwh, pue,
       sum(seconds) AS n, sum(util_sum) AS util, sum(energy_mj) AS mj, sum(measured_mj) AS measured
FROM {source}
GROUP BY day_text, hour_s, instance, gpu_uuid, gpu_model, stream, plan, rent_price, rent_per_s, discount_pct,
         site, band, tariff_per_kwh, pue
"""


def hour_name(hour_s: int, tz: Any) -> str:
    """The hour starting at UTC epoch `hour_s`, named by its start in `tz`: ``2026-03-05T14:00:00+08:00``."""
    return datetime.fromtimestamp(hour_s, tz).isoformat(timespec="seconds")


def usage_report(db: Any, rules: Any, tenant: str, period: str, *, granularity: str = "day",
                 now: datetime | None = None) -> UsageReport:
    """Build the report, one row per day (or hour) × instance × GPU; an empty one when the
    tenant had no usage in the period. ValueError for a granularity not in GRANULARITIES."""
    if granularity not in GRANULARITIES:
        raise ValueError(f"unknown granularity {granularity!r}; use one of: {', '.join(GRANULARITIES)}")
    rules.period_bounds(period)
    hourly = granularity == "hour"
    source, params = rated_source(db, rules, period, tenant)
    sql = _SQL.format(source=source, hour="toUnixTimestamp(hour)" if hourly else "toUInt32(0)")
    seconds: dict[tuple, int] = defaultdict(int)
    util: dict[tuple, Decimal] = defaultdict(Decimal)
    rent: dict[tuple, Fraction] = defaultdict(Fraction)
    kwh: dict[tuple, Fraction] = defaultdict(Fraction)
    cost: dict[tuple, Fraction] = defaultdict(Fraction)
    measured_kwh: dict[tuple, Fraction] = defaultdict(Fraction)  # IT energy, before PUE
    estimated_kwh: dict[tuple, Fraction] = defaultdict(Fraction)
    rent_usage: list[RentUsage] = []
    energy_usage: list[EnergyUsage] = []
    for (day, hour_s, instance, gpu, model, stream, plan, price, per_s, pct, site, band, tariff, pue,
         n, util_sum, mj, measured) in db.query(sql, params):
        key = (day, int(hour_s), instance, gpu, model)
        if stream == "rent":  # after the contract's discount
            seconds[key] += int(n)
            util[key] += Decimal(util_sum)
            rent[key] += rent_amount(int(n), price, int(per_s), pct)
            rent_usage.append(RentUsage(gpu_model=model, plan=plan, price=plain(price), per_s=int(per_s),
                                        seconds=int(n), discount_pct=plain(pct)))
        else:
            kwh[key] += billed_kwh(int(mj), pue)
            cost[key] += energy_amount(int(mj), pue, tariff)
            measured_kwh[key] += Fraction(int(measured), MJ_PER_KWH)
            estimated_kwh[key] += Fraction(int(mj) - int(measured), MJ_PER_KWH)
            energy_usage.append(EnergyUsage(site=site, band=band, tariff_per_kwh=plain(tariff), pue=plain(pue),
                                            energy_mj=int(mj)))
    # the invoice's lines before credits, adjustments and VAT: the totals every format adds up to
    lines = build_invoice(tenant, period, rent_usage, energy_usage, (), Decimal(0), Decimal(0)).lines
    keys = sorted(set(seconds) | set(kwh))
    shares = {
        "hours": apportion([gpu_hours(seconds.get(k, 0)) for k in keys], _sum(lines, "quantity", "rent"), 6),
        "rent": apportion([rent.get(k, Fraction(0)) for k in keys], _sum(lines, "amount", "rent", "discount"), 2),
        "kwh": apportion([kwh.get(k, Fraction(0)) for k in keys], _sum(lines, "quantity", "electricity"), 6),
        "cost": apportion([cost.get(k, Fraction(0)) for k in keys], _sum(lines, "amount", "electricity"), 2),
        "measured": _graded(measured_kwh, keys),
        "estimated": _graded(estimated_kwh, keys),
    }
    tz = rules.billing_tz
    rows = []
    for i, key in enumerate(keys):
        day, hour_s, instance, gpu, model = key
        n = seconds.get(key, 0)
        avg = (util[key] / n).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP) if n else Decimal("0.0")
        rows.append(UsageRow(
            day=day, instance=instance, gpu_uuid=gpu, gpu_model=model,
            gpu_hours=shares["hours"][i], avg_util_pct=avg, kwh=shares["kwh"][i],
            rent=shares["rent"][i], electricity=shares["cost"][i],
            hour=hour_name(hour_s, tz) if hourly else "",
            measured_it_kwh=shares["measured"][i], estimated_it_kwh=shares["estimated"][i],
        ))
    generated = (now or datetime.now(timezone.utc)).isoformat(timespec="seconds").replace("+00:00", "Z")
    return UsageReport(tenant=tenant, period=period, generated_at=generated, rows=tuple(rows),
                       granularity=granularity, time_zone=str(tz), lines=lines, seller=rules.seller)


def _graded(kwh: dict[tuple, Fraction], keys: list[tuple]) -> list:
    """The rows' share of one grade of IT energy: each within 1e-6 kWh of its exact value, and
    together its exact total rounded half up to 1e-6 kWh (there is no invoice line to equal)."""
    exact = [kwh.get(k, Fraction(0)) for k in keys]
    return apportion(exact, round_quantity(sum(exact, Fraction(0))), 6)


def _sum(lines: tuple[InvoiceLine, ...], field: str, *kinds: str) -> Decimal:
    """Σ `field` (the rounded amount or quantity) of the lines of `kinds`: what the invoice shows."""
    return sum((getattr(line, field) for line in lines if line.kind in kinds), Decimal(0))
