"""Where every report reads rated data: rolled-up hours, and the per-second rows of the rest.

`rated_source(db, rules, period, tenant)` is a relation (SQL text and parameters) with one
row per hour and price terms — the grain of `rated_hours` — for a whole period. Hours with
a published rollup and no write since are read from `rated_hours`; hours written since
their rollup, or never rolled up, are grouped from `rated_seconds FINAL` on the fly by the
same SELECT the rollup step writes with (`grouped_sql`). A read is therefore exact at any
moment, whatever the rollup's lag; the rollup only makes it fast. Invoices, late-data
adjustments, cost share and what-if, usage reports and the audit all read through here.

Columns: period, tenant, hour, day (billing time zone), stream, gpu_uuid, instance,
gpu_model, site, plan, rent_price, rent_per_s, discount_pct, band, tariff_per_kwh, pue —
then seconds, util_sum, energy_mj, measured_mj (of energy_mj, the mJ that came from the
cards' counters; energy_mj − measured_mj was estimated from power_w: SPEC §4), and with
`minutes=True` minutes / minute_qty (per minute of the hour: rented seconds or mJ, for
re-pricing under other rules).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from warehouse import writes

_GRAIN = (
    "period, tenant, toStartOfHour(second) AS hour, toDate(second, {tz:String}) AS day, stream, gpu_uuid, instance, "
    "gpu_model, site, plan, rent_price, rent_per_s, discount_pct, band, tariff_per_kwh, pue"
)
_GRAIN_NAMES = (
    "period, tenant, hour, day, stream, gpu_uuid, instance, gpu_model, site, plan, rent_price, rent_per_s, "
    "discount_pct, band, tariff_per_kwh, pue"
)
# rated_seconds.energy_mj: the column, not the alias of its sum. measured_mj: the grade of the
# hour's energy (rated_seconds.measured = 1: the second's energy is its card counter's rise).
_QUANTITIES = (
    "toUInt32(count()) AS seconds, sum(util_pct) AS util_sum, sum(rated_seconds.energy_mj) AS energy_mj, "
    "sumIf(rated_seconds.energy_mj, rated_seconds.measured = 1) AS measured_mj"
)
# the quantity columns of the rollup grain, in the order grouped_sql writes them
QUANTITY_NAMES = "seconds, util_sum, energy_mj, measured_mj"
_BY_MINUTE = (
    "(sumMap([toUInt8(toMinute(second))], [if(stream = 'rent', toUInt64(1), rated_seconds.energy_mj)]) AS by_minute).1 AS minutes, "
    "by_minute.2 AS minute_qty"
)


@dataclass(frozen=True)
class Coverage:
    """How a period's hours are read now."""

    period: str
    rolled: int  # hours read from rated_hours
    live: tuple[int, ...]  # hours (UTC start, epoch s) grouped from rated_seconds
    frozen: tuple[int, ...]  # hours written after retention dropped the period's per-second rows: not billed


def second_range(lo: int, hi: int, column: str = "second") -> str:
    """SQL: rows whose `column` is in [lo, hi) — a range the primary keys can use."""
    return f"({column} >= toDateTime({int(lo)}, 'UTC') AND {column} < toDateTime({int(hi)}, 'UTC'))"


def hour_range(hour: int) -> str:
    return second_range(hour, hour + 3600)


def hours_range(hours: Iterable[int], column: str = "second", *, margin: int = 0) -> str:
    """SQL: rows whose `column` is in one of `hours` (UTC starts, epoch s), consecutive hours as one
    range, widened by `margin` seconds on either side; `0` (no row) when there are none."""
    return " OR ".join(second_range(lo - margin, hi + margin, column)
                       for lo, hi in _runs(tuple(sorted(set(hours))))) or "0"


def grouped_sql(where: str, *, minutes: bool = False, relation: str = "rated_seconds FINAL") -> str:
    """The rated seconds matching `where`, grouped to the rollup grain (needs the {tz:String} parameter).
    `relation` is another relation of rated_seconds' columns to group instead (a subquery; it
    needs `measured` too, the grade measured_mj is summed by)."""
    quantities = f"{_QUANTITIES}, {_BY_MINUTE}" if minutes else _QUANTITIES
    source = relation if relation == "rated_seconds FINAL" else f"({relation}) AS rated_seconds"
    return f"SELECT {_GRAIN}, {quantities} FROM {source} WHERE {where} GROUP BY {_GRAIN_NAMES}"


def retained_periods(db: Any) -> set[str]:
    """Periods whose per-second rows retention has dropped (reports read their rollups only)."""
    return {row[0] for row in db.query("SELECT DISTINCT period FROM retention_runs")}


def coverage(db: Any, rules: Any, period: str) -> Coverage:
    """Which hours of `period` are read from rollups, which from the per-second rows."""
    margin_ms = writes.MARGIN_S * 1000  # stamps say "written until": warehouse/writes.py
    tz = str(rules.billing_tz)
    written = {int(h): int(w) for h, w in db.query(
        "SELECT toUnixTimestamp(hour), toUnixTimestamp64Milli(max(written_at)) FROM rated_writes "
        "WHERE period = {p:String} GROUP BY hour", {"p": period})}
    rolled = {int(h): (int(started), zone) for h, started, zone in db.query(
        "SELECT toUnixTimestamp(hour), toUnixTimestamp64Milli(latest.1), latest.2 FROM "
        "(SELECT hour, argMax(tuple(started_at, billing_tz), generation) AS latest FROM rollup_runs "
        " WHERE period = {p:String} GROUP BY hour)", {"p": period})}
    retained = period in retained_periods(db)
    live, frozen, clean = [], [], 0
    for hour in sorted(set(written) | set(rolled)):
        started, zone = rolled.get(hour, (None, None))
        fresh = started is not None and zone == tz and written.get(hour, 0) < started - margin_ms
        if fresh or (retained and started is not None):
            clean += 1
            if not fresh:
                frozen.append(hour)
        elif retained:
            frozen.append(hour)
        else:
            live.append(hour)
    return Coverage(period, clean, tuple(live), tuple(frozen))


def rated_source(db: Any, rules: Any, period: str, tenant: str | None = None, *,
                 minutes: bool = False) -> tuple[str, dict]:
    """The period's rated data at the rollup grain, as `(SELECT …)` and its parameters."""
    return source_of(coverage(db, rules, period), rules, tenant, minutes=minutes)


def source_of(cov: Coverage, rules: Any, tenant: str | None = None, *, minutes: bool = False) -> tuple[str, dict]:
    params = {"period": cov.period, "tenant": tenant or "", "tz": str(rules.billing_tz)}
    own = " AND tenant = {tenant:String}" if tenant is not None else ""
    columns = f"{_GRAIN_NAMES}, {QUANTITY_NAMES}" + (", minutes, minute_qty" if minutes else "")
    runs = _runs(cov.live)
    live = " OR ".join(second_range(lo, hi) for lo, hi in runs)
    rolled = (
        f"SELECT {columns} FROM rated_hours WHERE period = {{period:String}}{own}"
        " AND (hour, generation) IN (SELECT hour, max(generation) FROM rollup_runs WHERE period = {period:String} GROUP BY hour)"
        + (" AND NOT (" + " OR ".join(second_range(lo, hi, "hour") for lo, hi in runs) + ")" if runs else "")
    )
    parts = [rolled]
    if live:
        parts.append(grouped_sql(f"period = {{period:String}}{own} AND ({live})", minutes=minutes))
    return "(" + " UNION ALL ".join(parts) + ")", params


def card_models_sql(cov: Coverage) -> str:
    """(gpu_uuid, model) from usage readings: rolled-up hours' (card_models) and the live hours'."""
    live = " OR ".join(second_range(lo, hi) for lo, hi in _runs(cov.live))
    usage = f" UNION ALL SELECT gpu_uuid, gpu_model FROM readings_usage WHERE {live}" if live else ""
    return f"(SELECT gpu_uuid, min(gpu_model) AS model FROM (SELECT gpu_uuid, gpu_model FROM card_models{usage}) GROUP BY gpu_uuid)"


def _runs(hours: tuple[int, ...]) -> list[tuple[int, int]]:
    """Consecutive hours as [lo, hi) ranges of seconds."""
    runs: list[list[int]] = []
    for hour in hours:
        if runs and runs[-1][1] == hour:
            runs[-1][1] = hour + 3600
        else:
            runs.append([hour, hour + 3600])
    return [(lo, hi) for lo, hi in runs]
