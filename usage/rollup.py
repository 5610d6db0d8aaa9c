"""The rollup step: rated_seconds → rated_hours, one whole hour at a time, exact and convergent.

An hour is recomputed from the per-second rows (`rated_seconds FINAL`) and written whole
under a new generation; the generation is published in `rollup_runs` only after its rows
are in. Readers (usage/rated.py) take a rolled-up hour only at its published generation,
and read an hour from the per-second rows while it has writes newer than its rollup. So:

- duplicates, replays and late rows re-written with a higher version are what FINAL makes
  of them, exactly as a read of the per-second rows would;
- a rollup killed before it publishes leaves rows of an unpublished generation, never read
  and deleted by a later rollup of the hour;
- energy moving from unallocated to a tenant (a late usage reading) re-writes per-second
  rows, whose hour the sink stamps in `rated_writes` (the database's clock; warehouse/writes.py),
  which makes the hour stale until it is rolled up again;
- a published generation names the revisions of the rules that priced its hour's rows
  (`rollup_runs.rules_revisions`, from the sink's stamps in `rated_revisions`).

`roll_up` is the job: `gpubill rollup`, and every few minutes in `gpubill up` and
`gpubill scheduler`. It rolls up every hour that is stale or new and whose last write is
older than the margin (warehouse/writes.py: about two minutes after its last write), so an hour
still being written is not rolled up over and over.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

from usage.failpoints import pause_at
from usage.rated import grouped_sql, hour_range, retained_periods
from warehouse import writes
from warehouse.cluster import mutation_target

log = logging.getLogger("gpubill.rollup")

_COLUMNS = (
    "period, tenant, hour, day, stream, gpu_uuid, instance, gpu_model, site, plan, rent_price, rent_per_s, "
    "discount_pct, band, tariff_per_kwh, pue, seconds, util_sum, energy_mj, measured_mj, minutes, minute_qty, generation"
)

# (period, hour) with writes and no rollup at least as new as the last of them, settled.
_DUE_SQL = """
SELECT w.period, toUnixTimestamp(w.hour), toUnixTimestamp64Milli(w.written_at)
FROM (SELECT period, hour, max(written_at) AS written_at FROM rated_writes WHERE_PERIOD GROUP BY period, hour) AS w
LEFT JOIN (SELECT period, hour, argMax(tuple(started_at, billing_tz), generation) AS latest
           FROM rollup_runs WHERE_PERIOD GROUP BY period, hour) AS r
    ON w.period = r.period AND w.hour = r.hour
WHERE (r.latest.1 IS NULL OR w.written_at >= r.latest.1 - INTERVAL {margin:UInt32} SECOND OR r.latest.2 != {tz:String})
  AND w.written_at < now64(3) - INTERVAL {margin:UInt32} SECOND
ORDER BY w.period, w.hour
SETTINGS join_use_nulls = 1
"""


@dataclass
class RollupReport:
    hours: list[tuple[str, int]] = field(default_factory=list)  # (period, hour) rolled up now
    frozen: list[tuple[str, int]] = field(default_factory=list)  # written after retention: not rolled up


def roll_up(db: Any, rules: Any, *, period: str | None = None,
            progress: Callable[[str, int], None] | None = None) -> RollupReport:
    """Roll up every due hour (of `period`, or of all periods); returns what it did."""
    tz = str(rules.billing_tz)
    where = "WHERE period = {period:String}" if period else ""
    due = db.query(_DUE_SQL.replace("WHERE_PERIOD", where), {"period": period or "", "tz": tz, "margin": writes.MARGIN_S})
    retained = retained_periods(db)
    report = RollupReport()
    for p, hour, _ in due:
        if p in retained:  # the per-second rows are gone: a recomputation would lose the rest of the hour
            report.frozen.append((p, int(hour)))
            continue
        roll_up_hour(db, tz, p, int(hour))
        report.hours.append((p, int(hour)))
        if progress:
            progress(p, int(hour))
    if report.frozen:
        log.error("rated data written after retention dropped its period, not billed: %s (gpubill audit lists it)",
                  ", ".join(f"{p} {_iso(h)}" for p, h in report.frozen[:10]))
    if report.hours:
        drop_superseded(db, sorted({p for p, _ in report.hours}))
    return report


def roll_up_hour(db: Any, tz: str, period: str, hour: int) -> int:
    """Recompute one hour of one period into rated_hours and publish it; returns its generation."""
    generation, started_at = db.query("SELECT toUnixTimestamp64Nano(now64(9)), now64(3, 'UTC')")[0]
    body = grouped_sql(f"period = {{period:String}} AND {hour_range(hour)}", minutes=True)
    db.command(
        f"INSERT INTO rated_hours ({_COLUMNS}) SELECT *, {int(generation)} FROM ({body})",
        {"period": period, "tz": tz},
    )
    db.command(
        f"INSERT INTO card_models SELECT gpu_uuid, min(gpu_model) FROM readings_usage WHERE {hour_range(hour)} "
        "GROUP BY gpu_uuid"
    )
    _pause_before_publish()
    rows, seconds, energy = db.query(
        "SELECT count(), sum(seconds), sum(energy_mj) FROM rated_hours "
        "WHERE period = {period:String} AND hour = toDateTime({hour:UInt32}, 'UTC') AND generation = {g:UInt64}",
        {"period": period, "hour": hour, "g": int(generation)},
    )[0]
    revisions = sorted(str(r) for (r,) in db.query(
        "SELECT DISTINCT rules_revision FROM rated_revisions "
        "WHERE period = {period:String} AND hour = toDateTime({hour:UInt32}, 'UTC')", {"period": period, "hour": hour}))
    db.insert("rollup_runs", [[period, datetime.fromtimestamp(hour, timezone.utc), int(generation), started_at, tz,
                               int(rows), int(seconds or 0), int(energy or 0), revisions]],
              ["period", "hour", "generation", "started_at", "billing_tz", "rows", "seconds", "energy_mj",
               "rules_revisions"])
    return int(generation)


def drop_superseded(db: Any, periods: list[str]) -> None:
    """Delete the rows of `periods` whose generation is older than their hour's published one
    (never read again). Rows of newer, unpublished generations are a rollup in flight: kept."""
    db.command(
        f"DELETE FROM {mutation_target('rated_hours', db.cluster)} "
        "WHERE period IN {periods:Array(String)} AND (period, hour, generation) IN ("
        " SELECT h.period, h.hour, h.generation FROM (SELECT DISTINCT period, hour, generation FROM rated_hours"
        "  WHERE period IN {periods:Array(String)}) AS h"
        " INNER JOIN (SELECT period, hour, max(generation) AS published FROM rollup_runs"
        "  WHERE period IN {periods:Array(String)} GROUP BY period, hour) AS r"
        " ON h.period = r.period AND h.hour = r.hour WHERE h.generation < r.published)",
        {"periods": periods},
    )


def _pause_before_publish() -> None:
    """The failpoint `rollup-publish` (usage/failpoints.py): between writing an hour's rows and publishing them."""
    pause_at("rollup-publish")


def _iso(second: int) -> str:
    return datetime.fromtimestamp(second, timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
