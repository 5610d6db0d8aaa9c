"""Build a customer's usage report (SPEC §6, `reports.usage_model`): per day, instance and GPU.

Only rows of the asked tenant are read (the source's WHERE clause is the tenant boundary,
and the rollups are ordered tenant first, so a month reads only the tenant's own granules),
so a tenant never sees another tenant's data. Money is rounded once per report row; the
invoice rounds once per invoice line, so row sums may differ from it by a few fen.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timezone
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from typing import Any

from billing_rules import billed_kwh, energy_amount, gpu_hours, rent_amount, round_fen, round_quantity
from reports.rated import rated_source
from reports.usage_model import UsageReport, UsageRow

_SQL = """
SELECT toString(day) AS day_text, instance, gpu_uuid, gpu_model, stream,
       rent_price, rent_per_s, discount_pct, tariff_per_kwh, pue,
       sum(seconds) AS n, sum(util_sum) AS util, sum(energy_mj) AS mj
FROM {source}
GROUP BY day_text, instance, gpu_uuid, gpu_model, stream, rent_price, rent_per_s, discount_pct, tariff_per_kwh, pue
"""


def usage_report(db: Any, rules: Any, tenant: str, period: str, *, now: datetime | None = None) -> UsageReport:
    """Build the report; an empty one when the tenant had no usage in the period."""
    rules.period_bounds(period)
    source, params = rated_source(db, rules, period, tenant)
    seconds: dict[tuple, int] = defaultdict(int)
    util: dict[tuple, Decimal] = defaultdict(Decimal)
    rent: dict[tuple, Fraction] = defaultdict(Fraction)
    kwh: dict[tuple, Fraction] = defaultdict(Fraction)
    cost: dict[tuple, Fraction] = defaultdict(Fraction)
    for day, instance, gpu, model, stream, price, per_s, pct, tariff, pue, n, util_sum, mj in db.query(_SQL.format(source=source), params):
        key = (day, instance, gpu, model)
        if stream == "rent":  # after the contract's discount
            seconds[key] += int(n)
            util[key] += Decimal(util_sum)
            rent[key] += rent_amount(int(n), price, int(per_s), pct)
        else:
            kwh[key] += billed_kwh(int(mj), pue)
            cost[key] += energy_amount(int(mj), pue, tariff)
    rows = []
    for key in sorted(set(seconds) | set(kwh)):
        day, instance, gpu, model = key
        n = seconds.get(key, 0)
        avg = (util[key] / n).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP) if n else Decimal("0.0")
        rows.append(UsageRow(
            day=day, instance=instance, gpu_uuid=gpu, gpu_model=model,
            gpu_hours=round_quantity(gpu_hours(n)), avg_util_pct=avg, kwh=round_quantity(kwh[key]),
            rent=round_fen(rent[key]), electricity=round_fen(cost[key]),
        ))
    generated = (now or datetime.now(timezone.utc)).isoformat(timespec="seconds").replace("+00:00", "Z")
    return UsageReport(tenant=tenant, period=period, generated_at=generated, rows=tuple(rows))
