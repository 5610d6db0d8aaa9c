"""The days of `gpubill bench month` (gpubill/bench/month.py) without per-second rows: written as exactly
the rollups those rows would give, and checked against the real rollup of the hours that have them.

The fleet, its readings and their per-second rows: gpubill/bench/month_fleet.py.

- **Per-second days, then rollups only.** Only the first `per_second_hours` of the month
  (default 24) get per-second rows; they are rolled up by the real step
  (`usage.rollup.roll_up`). The rest of the `days` are written as exactly the rollups
  those per-second rows would produce: one day's per-minute sums per card, stream, tenant
  and instance (`bench_minutes`, from the same generator; quantities are day-periodic) are
  given each later day's price terms minute by minute and grouped to the rollup grain with
  the rollup's own expressions (hour, billing-zone day, UTC minute of the hour; `sumMap` of
  per-minute quantities adds up to the per-second one). This is exact when prices change
  on whole minutes, which is checked (the rule files cannot say seconds). The synthetic
  hours are published as a rollup would publish them: `rollup_runs` (one generation,
  started an hour before the build) and `rated_writes` stamps two hours before the build,
  so every read takes them as clean rolled-up hours; `card_models` gets the fleet's cards.
  Before anything is timed, the synthetic rollup of every per-second hour is compared with
  the real rollup of that hour (a fingerprint per hour); any difference aborts the run.
"""

from __future__ import annotations

import time
from typing import Any

from gpubill.bench.month_fleet import DAY_S, Fleet, Say, card_arrays, iso, price_terms, readings_sql, term_arrays
from gpubill.errors import GpubillError

# The rollup's columns (usage/rollup.py writes rated_hours in this order).
HOUR_COLUMNS = (
    "period, tenant, hour, day, stream, gpu_uuid, instance, gpu_model, site, plan, rent_price, rent_per_s, "
    "discount_pct, band, tariff_per_kwh, pue, seconds, util_sum, energy_mj, minutes, minute_qty, generation"
)
_GRAIN = ("period, tenant, hour, day, stream, gpu_uuid, instance, gpu_model, site, plan, rent_price, rent_per_s, "
          "discount_pct, band, tariff_per_kwh, pue")


# -- rollups of the days without per-second rows ------------------------------------------

_MINUTES_DDL = """
CREATE TABLE IF NOT EXISTS bench_minutes
(c UInt32, m UInt16, stream Enum8('rent' = 1, 'energy' = 2), tenant String, instance String,
 n UInt32, u Decimal(38, 4), e UInt64, q UInt64)
ENGINE = MergeTree ORDER BY (m, c)
"""


def write_minutes(db: Any, fleet: Fleet) -> None:
    """bench_minutes: one day's per-minute sums of the rated seconds, per card, stream, tenant and instance."""
    db.command("DROP TABLE IF EXISTS bench_minutes")
    db.command(_MINUTES_DDL)
    day = readings_sql(fleet, fleet.start, fleet.start + DAY_S)
    db.command(f"INSERT INTO bench_minutes SELECT c, toUInt16(intDiv(sod, 60)) AS m, 'rent', assumeNotNull(tenant), "
               f"ifNull(instance, ''), count(), sum(util_pct), 0, count() FROM ({day}) WHERE rented "
               "GROUP BY c, m, tenant, instance")
    db.command(f"INSERT INTO bench_minutes SELECT c, toUInt16(intDiv(sod, 60)) AS m, 'energy', ifNull(tenant, ''), "
               f"ifNull(instance, ''), count(), 0, sum(power_mw), sum(power_mw) FROM ({day}) GROUP BY c, m, tenant, instance")


def rollup_sql(fleet: Fleet, lo: int, hi: int) -> str:
    """The rollup rows (rated_hours' columns but `generation`) of the whole hours [lo, hi), all of one
    day of the period, from bench_minutes: what usage.rollup writes for these hours' rated seconds."""
    day_start = fleet.start + (lo - fleet.start) // DAY_S * DAY_S
    if hi > day_start + DAY_S:
        raise ValueError("rollup_sql: [lo, hi) must lie within one day of the period")
    terms = price_terms(fleet, lo, hi)
    if any(s % 60 for s in terms.starts):
        raise GpubillError("a price changes off a whole minute: the bench's synthetic rollups need minute edges")
    defs = ",\n  ".join([*card_arrays(fleet), *term_arrays(fleet, terms, "sec")])
    m_lo, m_hi = (lo - day_start) // 60, (hi - day_start) // 60
    return f"""
WITH
  {defs},
  toUInt32({day_start} + m * 60) AS sec,
  toDateTime(sec, 'UTC') AS t,
  stream = 'rent' AS is_rent
SELECT
  '{fleet.period}' AS period, tenant, toStartOfHour(t) AS hour, toDate(t, '{fleet.tz}') AS day, stream,
  k_uuid[c + 1] AS gpu_uuid, instance, k_model[c + 1] AS gpu_model, '{fleet.site}' AS site,
  if(is_rent, t_plan[ti], '') AS plan, if(is_rent, t_price[ti], toDecimal64(0, 6)) AS rent_price,
  if(is_rent, t_per_s[ti], toUInt32(0)) AS rent_per_s, if(is_rent, t_discount[ti], toDecimal32(0, 4)) AS discount_pct,
  if(is_rent, '', t_band[iv + 1]) AS band, if(is_rent, toDecimal64(0, 6), t_tariff[iv + 1]) AS tariff_per_kwh,
  if(is_rent, toDecimal32(0, 4), t_pue[iv + 1]) AS pue,
  toUInt32(sum(n)) AS seconds, sum(u) AS util_sum, sum(e) AS energy_mj,
  (sumMap([toUInt8(toMinute(t))], [q]) AS by_minute).1 AS minutes, by_minute.2 AS minute_qty
FROM bench_minutes
WHERE m >= {m_lo} AND m < {m_hi}
GROUP BY {_GRAIN}
"""


def _days(lo: int, hi: int, start: int) -> list[tuple[int, int]]:
    """[lo, hi) cut at the period's day edges."""
    pieces = []
    while lo < hi:
        edge = min(hi, start + ((lo - start) // DAY_S + 1) * DAY_S)
        pieces.append((lo, edge))
        lo = edge
    return pieces


def write_rollups(db: Any, fleet: Fleet, lo: int, hi: int, *, generation: int, started_ms: int, written_ms: int,
                  say: Say = lambda _: None) -> None:
    """Publish [lo, hi) as rolled-up hours, as the rollup step would have (see the module docstring)."""
    for a, b in _days(lo, hi, fleet.start):
        t0 = time.perf_counter()
        db.command(f"INSERT INTO rated_hours ({HOUR_COLUMNS}) SELECT *, {generation} FROM ({rollup_sql(fleet, a, b)})")
        say(f"rollups of {iso(a)} … {iso(b)}: {time.perf_counter() - t0:.1f} s")
    where = f"period = '{fleet.period}' AND generation = {generation}"
    db.command("INSERT INTO rollup_runs (period, hour, generation, started_at, billing_tz, rows, seconds, energy_mj, "
               f"rules_revisions) SELECT period, hour, {generation}, fromUnixTimestamp64Milli({started_ms}, 'UTC'), "
               f"'{fleet.tz}', count(), sum(seconds), sum(energy_mj), ['{fleet.rules.revision}'] FROM rated_hours "
               f"WHERE {where} GROUP BY period, hour")
    db.command(f"INSERT INTO rated_writes SELECT DISTINCT period, hour, fromUnixTimestamp64Milli({written_ms}, 'UTC') "
               f"FROM rated_hours WHERE {where}")
    db.command(f"INSERT INTO card_models SELECT u, m FROM (WITH {', '.join(card_arrays(fleet)[:3])} "
               f"SELECT k_uuid[number + 1] AS u, k_model[number + 1] AS m FROM numbers({fleet.gpus}))")


_FINGERPRINT = (
    "SELECT toUnixTimestamp(hour) AS h, count(), sum(cityHash64(toString(tuple(tenant, day, stream, gpu_uuid, instance, "
    "gpu_model, site, plan, rent_price, rent_per_s, discount_pct, band, tariff_per_kwh, pue, seconds, util_sum, "
    "energy_mj, minutes, minute_qty)))) FROM {table} WHERE period = '{period}' AND hour >= toDateTime({lo}, 'UTC') "
    "AND hour < toDateTime({hi}, 'UTC'){published} GROUP BY h ORDER BY h"
)


def synthetic_differences(db: Any, fleet: Fleet, lo: int, hi: int) -> list[int]:
    """Hours of [lo, hi) whose published rollup differs from the synthetic one (`write_rollups`'s rows)."""
    db.command("DROP TABLE IF EXISTS bench_check")
    db.command("CREATE TABLE bench_check AS rated_hours")
    for a, b in _days(lo, hi, fleet.start):
        db.command(f"INSERT INTO bench_check ({HOUR_COLUMNS}) SELECT *, 0 FROM ({rollup_sql(fleet, a, b)})")
    published = (" AND (hour, generation) IN (SELECT hour, max(generation) FROM rollup_runs "
                 f"WHERE period = '{fleet.period}' GROUP BY hour)")
    real = db.query(_FINGERPRINT.format(table="rated_hours", period=fleet.period, lo=lo, hi=hi, published=published))
    synthetic = db.query(_FINGERPRINT.format(table="bench_check", period=fleet.period, lo=lo, hi=hi, published=""))
    db.command("DROP TABLE bench_check")
    real_by, synthetic_by = {int(h): (n, f) for h, n, f in real}, {int(h): (n, f) for h, n, f in synthetic}
    return sorted(h for h in set(real_by) | set(synthetic_by) if real_by.get(h) != synthetic_by.get(h))
