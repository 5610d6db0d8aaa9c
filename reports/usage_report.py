"""Build a customer's usage report (SPEC §6, `reports.usage_model`): per day or hour, instance and GPU.

Only rows of the asked tenant are read (the source's WHERE clause is the tenant boundary,
and the rollups are ordered tenant first, so a month reads only the tenant's own granules),
so a tenant never sees another tenant's data. Money is rounded once per report row; the
invoice rounds once per invoice line, so row sums may differ from it by a few fen (and an
hourly report's sums from the daily one's, since it rounds once per hour row).

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

from billing_rules import billed_kwh, energy_amount, gpu_hours, rent_amount, round_fen, round_quantity
from reports.usage_model import GRANULARITIES, UsageReport, UsageRow
from usage.rated import rated_source

_SQL = """
SELECT toString(day) AS day_text, {hour} AS hour_s, instance, gpu_uuid, gpu_model, stream,
       rent_price, rent_per_s, discount_pct, tariff_per_kwh, pue,
       sum(seconds) AS n, sum(util_sum) AS util, sum(energy_mj) AS mj
FROM {source}
GROUP BY day_text, hour_s, instance, gpu_uuid, gpu_model, stream, rent_price, rent_per_s, discount_pct, tariff_per_kwh, pue
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
    for day, hour_s, instance, gpu, model, stream, price, per_s, pct, tariff, pue, n, util_sum, mj in db.query(sql, params):
        key = (day, int(hour_s), instance, gpu, model)
        if stream == "rent":  # after the contract's discount
            seconds[key] += int(n)
            util[key] += Decimal(util_sum)
            rent[key] += rent_amount(int(n), price, int(per_s), pct)
        else:
            kwh[key] += billed_kwh(int(mj), pue)
            cost[key] += energy_amount(int(mj), pue, tariff)
    tz = rules.billing_tz
    rows = []
    for key in sorted(set(seconds) | set(kwh)):
        day, hour_s, instance, gpu, model = key
        n = seconds.get(key, 0)
        avg = (util[key] / n).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP) if n else Decimal("0.0")
        rows.append(UsageRow(
            day=day, instance=instance, gpu_uuid=gpu, gpu_model=model,
            gpu_hours=round_quantity(gpu_hours(n)), avg_util_pct=avg, kwh=round_quantity(kwh[key]),
            rent=round_fen(rent[key]), electricity=round_fen(cost[key]),
            hour=hour_name(hour_s, tz) if hourly else "",
        ))
    generated = (now or datetime.now(timezone.utc)).isoformat(timespec="seconds").replace("+00:00", "Z")
    return UsageReport(tenant=tenant, period=period, generated_at=generated, rows=tuple(rows),
                       granularity=granularity, time_zone=str(tz))
