"""What the last clean audit found, per hour, and what each hour is now (table audit_hours, 0024).

An hour's prints say what the audit of it would read:

- `raw`: the hour's rows of readings_usage and readings_power, every column but the wall-clock
  ingested_at, as (count, sum of cityHash64 of the row) per table;
- `rated`: its rows of rated_seconds the same way (every column but rated_at), its published
  rollup rows (every column, generation included) and how reports read the hour now
  (usage.rated.Coverage: rolled up, live from the per-second rows, or frozen);
- `corrections`: a sha256 of the stored corrections covering the hour, in log order.

The prints are grouped scans, no FINAL, no join: they read each row once (about 2 s per hour
of 1,280 cards on two cores, docs/performance.md). They are taken from the tables themselves
rather than kept by the writers, so that any change to a row is seen, whoever made it and
however: an INSERT, an `ALTER … UPDATE`, a deleted part. Without FINAL a duplicate that a
merge later folds changes the count: that hour is then recomputed once more, which costs
time, never correctness. A sum of non-cryptographic hashes finds any ordinary change; someone
who can write the database and forge cityHash64 collisions can defeat it, and `gpubill audit
--full` does not use the prints at all.

A stored hour is taken only while its three prints, the rules (RuleSet.digest) and
AUDIT_VERSION are what they were; otherwise it is recomputed. The stored figures are the
hour's exact per-tenant sums (amounts as fractions), so an audit sums stored and recomputed
hours and rounds once per tenant, exactly as a full audit does.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from fractions import Fraction
from typing import Any

import orjson

from usage.rated import Coverage, second_range

# Bump when what the audit computes per hour changes: every stored hour is then recomputed.
# 2: counter energy (issue 39) — an hour's power print covers the readings 10 s around it.
AUDIT_VERSION = 2

_USAGE_PRINT = (
    "SELECT toUnixTimestamp(toStartOfHour(second)) AS h, count(), sum(cityHash64(event_id, ts, second, site, node, "
    "gpu_uuid, gpu_model, isNull(tenant), ifNull(tenant, ''), isNull(instance), ifNull(instance, ''), util_pct, "
    "mem_used_mib, src_partition, src_offset)) FROM readings_usage WHERE SECONDS GROUP BY h"
)
# A second's energy may come from the counter of a reading up to 10 s after it, measured from one
# up to 10 s before it (billing_rules/counters.py): a reading counts in every hour within 10 s.
_POWER_PRINT = (
    "SELECT h, count(), sum(x) FROM (SELECT arrayJoin(arrayDistinct([toUnixTimestamp(toStartOfHour(second - 10)), "
    "toUnixTimestamp(toStartOfHour(second)), toUnixTimestamp(toStartOfHour(second + 10))])) AS h, "
    "cityHash64(event_id, ts, second, site, node, gpu_uuid, power_mw, src_partition, src_offset, energy_mj, "
    "energy_epoch) AS x FROM readings_power WHERE second >= toDateTime({lo:UInt32} - 10, 'UTC') "
    "AND second < toDateTime({hi:UInt32} + 10, 'UTC')) WHERE h >= {lo:UInt32} AND h < {hi:UInt32} GROUP BY h"
)
_SECONDS_PRINT = (
    "SELECT toUnixTimestamp(toStartOfHour(second)) AS h, count(), sum(cityHash64(stream, gpu_uuid, second, tenant, "
    "instance, gpu_model, site, node, plan, rent_price, rent_per_s, discount_pct, util_pct, energy_mj, band, "
    "tariff_per_kwh, pue, version, src_partition, src_offset, measured)) FROM rated_seconds WHERE period = {period:String} "
    "GROUP BY h"
)
_ROLLUP_PRINT = (
    "SELECT toUnixTimestamp(hour) AS h, count(), sum(cityHash64(tenant, day, stream, gpu_uuid, instance, gpu_model, "
    "site, plan, rent_price, rent_per_s, discount_pct, band, tariff_per_kwh, pue, seconds, util_sum, energy_mj, "
    "minutes, minute_qty, generation, measured_mj)) FROM rated_hours WHERE period = {period:String} AND (hour, generation) IN "
    "(SELECT hour, max(generation) FROM rollup_runs WHERE period = {period:String} GROUP BY hour) GROUP BY h"
)
_CORRECTIONS = (
    "SELECT src_partition, src_offset, gpu_uuid, kind, toUnixTimestamp(from_s), toUnixTimestamp(to_s), "
    "ifNull(tenant, '\\0'), ifNull(instance, '\\0'), stream FROM corrections FINAL "
    "WHERE from_s < toDateTime({hi:UInt32}, 'UTC') AND to_s > toDateTime({lo:UInt32}, 'UTC')"
)
_STORED = (
    "SELECT toUnixTimestamp(hour), audit_version, rules_revision, raw_print, rated_print, corrections_print, figures "
    "FROM audit_hours FINAL WHERE period = {period:String}"
)
_COLUMNS = ["period", "hour", "generation", "audit_version", "rules_revision", "raw_print", "rated_print",
            "corrections_print", "figures"]


@dataclass(frozen=True)
class HourPrint:
    """What one hour's audit would read (see the module docstring); equal prints, equal inputs."""

    raw: str
    rated: str
    corrections: str


@dataclass(frozen=True)
class Exact:
    """One tenant's figures before rounding: rented seconds, millijoules, rent and electricity in yuan."""

    rent_seconds: int = 0
    energy_mj: int = 0
    rent: Fraction = Fraction(0)
    electricity: Fraction = Fraction(0)

    def __add__(self, other: Exact) -> Exact:
        return Exact(self.rent_seconds + other.rent_seconds, self.energy_mj + other.energy_mj,
                     self.rent + other.rent, self.electricity + other.electricity)

    def is_zero(self) -> bool:
        return self == Exact()


HourFigures = dict[str, Exact]  # per tenant ('' = unallocated energy)


def period_hours(lo: int, hi: int) -> list[int]:
    """The UTC hours (starts, epoch s) that hold a second of [lo, hi)."""
    return list(range(lo - lo % 3600, hi, 3600))


def hour_prints(db: Any, cov: Coverage, lo: int, hi: int) -> dict[int, HourPrint]:
    """The prints of every hour of the period [lo, hi) and of any other hour its rated rows name."""
    params = {"period": cov.period, "lo": lo, "hi": hi}
    where = second_range(lo, hi)
    counted: dict[str, dict[int, tuple[int, int]]] = {
        name: {int(h): (int(n), int(f)) for h, n, f in db.query(sql.replace("SECONDS", where), params)}
        for name, sql in (("usage", _USAGE_PRINT), ("power", _POWER_PRINT), ("seconds", _SECONDS_PRINT),
                          ("rollup", _ROLLUP_PRINT))
    }
    covering = _corrections_by_hour(db, lo, hi)
    live, frozen = set(cov.live), set(cov.frozen)
    hours = set(period_hours(lo, hi)).union(*(set(c) for c in counted.values()))

    def pair(name: str, hour: int) -> str:
        n, f = counted[name].get(hour, (0, 0))
        return f"{n}:{f}"

    prints = {}
    for hour in sorted(hours):
        state = "live" if hour in live else "frozen" if hour in frozen else "rolled"
        prints[hour] = HourPrint(f"{pair('usage', hour)}/{pair('power', hour)}",
                                 f"{state}/{pair('seconds', hour)}/{pair('rollup', hour)}",
                                 covering.get(hour, ""))
    return prints


def _corrections_by_hour(db: Any, lo: int, hi: int) -> dict[int, str]:
    """Per hour of [lo, hi) that a stored correction covers: a sha256 of those corrections in log order."""
    on_hour: dict[int, list[tuple]] = defaultdict(list)
    for row in sorted(tuple(r) for r in db.query(_CORRECTIONS, {"lo": lo, "hi": hi})):
        start, end = max(int(row[4]), lo), min(int(row[5]), hi)
        for hour in range(start - start % 3600, end, 3600):
            on_hour[hour].append(row)
    return {hour: hashlib.sha256(repr(rows).encode()).hexdigest() for hour, rows in on_hour.items()}


def clean_hours(db: Any, rules: Any, period: str, prints: dict[int, HourPrint]) -> dict[int, HourFigures]:
    """The hours whose last clean audit still holds (same prints, rules and AUDIT_VERSION), with their figures."""
    taken = {}
    for hour, version, revision, raw, rated, corrections, figures in db.query(_STORED, {"period": period}):
        now = prints.get(int(hour))
        if (int(version) == AUDIT_VERSION and revision == rules.digest and now is not None
                and now == HourPrint(raw, rated, corrections)):
            taken[int(hour)] = _loads(figures)
    return taken


def store_clean_hours(db: Any, rules: Any, period: str, generation: int,
                      hours: dict[int, tuple[HourPrint, HourFigures]]) -> None:
    """Keep `hours` (found clean by the audit that began at `generation`) with the prints taken before it."""
    if not hours:
        return
    rows = [[period, datetime.fromtimestamp(hour, timezone.utc), generation, AUDIT_VERSION, rules.digest,
             p.raw, p.rated, p.corrections, _dumps(figures)]
            for hour, (p, figures) in sorted(hours.items())]
    db.insert("audit_hours", rows, _COLUMNS)


def _dumps(figures: HourFigures) -> str:
    return orjson.dumps({t: [f.rent_seconds, f.energy_mj, str(f.rent), str(f.electricity)]
                         for t, f in figures.items()}, option=orjson.OPT_SORT_KEYS).decode()


def _loads(text: str) -> HourFigures:
    return {t: Exact(int(s), int(mj), Fraction(rent), Fraction(electricity))
            for t, (s, mj, rent, electricity) in orjson.loads(text).items()}
