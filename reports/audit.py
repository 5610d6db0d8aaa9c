"""Self-audit: recompute a period from the raw readings and compare with what the pipeline rated.

The raw side is one SQL pass over readings_usage and readings_power: the first reading per
(gpu, second) in partition order counts (duplicates and conflicts drop out), the period's
stored corrections apply as usage/corrections.py says (per card, in log order: a covering
void of usage drops the rent and leaves the energy unallocated, a void of power drops the
energy, a reattribute gives the second to its tenant, None to nobody), power joins the
usage of the same second, and the period is the billing-time-zone month of the second.
The rated side is what every report reads (usage.rated: published rollups, and the
per-second rows of hours not rolled up since their last write). Both are compared per tenant ('' = unallocated
energy): rented GPU-seconds, millijoules, and the exact amounts (rent priced by the rules
in force at each minute, electricity by each minute's band, tariff and PUE) rounded once.
Any difference is listed; none means the streaming result equals the batch join.

The rollups are checked too: every rolled-up hour's published rows against the per-second
rows grouped the same way now, by a fingerprint per hour; an hour that differs is listed.

Conflicts (SPEC §4) are not differences — the first reading in partition order counted, by
design — but they are never invisible: `conflicts_of` counts the period's conflicts per
reason ('second taken', 'event_id reused') and gives a few examples, for the audit to print.
So are the corrections that do not count: `correction_findings` lists the period's correction
conflicts (an event_id reused with other content, both positions) and counts the dead-lettered
corrections (streams/corrections_sync.py writes both).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from fractions import Fraction
from typing import Any, Iterable

import orjson

from billing_rules import energy_amount, rent_amount, round_fen
from billing_rules.counters import MAX_GAP_S
from schemas.events import parse_ts
from schemas.topics import TOPIC_CORRECTIONS
from reports.audit_hours import Exact, HourFigures, clean_hours, hour_prints, store_clean_hours
from usage.rated import Coverage, coverage, grouped_sql, hours_range, retained_periods, source_of

# What the period's corrections make of a usage reading's tenant (usage/corrections.py), with
# `on_it` the card's corrections covering the second in log order: '' (nobody) when any voids
# the usage (a later reattribute brings nothing back), else the last reattribute's tenant, else
# the reading's. The joins stay out of the WITH: ClickHouse's parser copies a UNION's WITH into
# its later SELECTs, and the gateway (gpubill/devenv/gateway) checks those copies node for node.
_CORRECTED_TENANT = ("if(arrayExists(x -> x.7, on_it), '', if(arrayExists(x -> x.5, on_it), "
                     "arrayLast(x -> x.5, on_it).6, READING))")
_ON_IT = "arrayFilter(x -> x.3 <= toUnixTimestamp(SECOND) AND toUnixTimestamp(SECOND) < x.4, c.cs) AS on_it"

_RAW_TEMPLATE = """
WITH
    c AS (
        -- the period's corrections per card, in log order (a card's are on one partition: offset order)
        SELECT gpu_uuid,
               arraySort(groupArray(tuple(src_partition, src_offset, toUnixTimestamp(from_s), toUnixTimestamp(to_s),
                                          kind = 'reattribute', ifNull(tenant, ''),
                                          kind = 'void_readings' AND stream IN ('usage', 'both'),
                                          kind = 'void_readings' AND stream IN ('power', 'both')))) AS cs
        FROM corrections FINAL
        WHERE from_s < toDateTime({hi:UInt32}, 'UTC') AND to_s > toDateTime({lo:UInt32}, 'UTC')
        GROUP BY gpu_uuid
    ),
    u AS (
        SELECT gpu_uuid, second,
               argMin(tuple(ifNull(tenant, ''), gpu_model, site), (src_partition, src_offset)) AS first
        FROM readings_usage
        WHERE SECONDS
        GROUP BY gpu_uuid, second
    ),
    pr AS (
        -- the first power reading per (gpu, second), 10 s around the seconds audited: the energy
        -- of a second may come from the counter of the reading after it, measured from the one before
        SELECT gpu_uuid, second, argMin(tuple(power_mw, site, energy_mj, energy_epoch), (src_partition, src_offset)) AS r
        FROM readings_power
        WHERE WIDE
        GROUP BY gpu_uuid, second
    ),
    pc AS (
        -- each reading with the previous one of its card, and the seconds it covers with their
        -- energy (SPEC §4): the rise of the counter since the previous reading of the same epoch
        -- at most 10 s before, if 0 ≤ rise ≤ 5,000 W × gap, split evenly, the remainder to the
        -- last, else its own second at power_w
        SELECT gpu_uuid, r.2 AS site,
               toInt64(toUInt32(second)) - toInt64(toUInt32(prev_second)) AS gap,
               toInt64(r.3) - toInt64(prev_r.3) AS rise,
               r.4 != '' AND prev_r.4 = r.4 AND gap BETWEEN 1 AND 10 AND rise BETWEEN 0 AND 5000000 * gap AS counted,
               arrayJoin(if(counted,
                            arrayMap(k -> tuple(toUInt32(second) - gap + k, toUInt64(intDiv(rise, gap) + if(k = gap, rise % gap, 0))),
                                     range(1, toUInt64(gap) + 1)),
                            [tuple(toUInt32(second), r.1)])) AS x
        FROM (SELECT gpu_uuid, second, r, lagInFrame(second, 1) OVER w AS prev_second, lagInFrame(r, 1) OVER w AS prev_r
              FROM pr WINDOW w AS (PARTITION BY gpu_uuid ORDER BY second ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW))
    ),
    p AS (
        SELECT gpu_uuid, toDateTime(x.1, 'UTC') AS second, tuple(x.2, site) AS first
        FROM pc
        WHERE SECONDS
    )
SELECT 'rent' AS stream, tenant, gpu_model, site, minute, count() AS n, toUInt64(0) AS mj
FROM (
    SELECT u.first.2 AS gpu_model, u.first.3 AS site, toUnixTimestamp(toStartOfMinute(u.second)) AS minute,
           ON_IT_U, TENANT_U AS tenant
    FROM u LEFT JOIN c ON u.gpu_uuid = c.gpu_uuid
)
WHERE tenant != ''
GROUP BY tenant, gpu_model, site, minute
UNION ALL
SELECT 'energy', tenant, '', site, minute, count(), sum(mj)
FROM (
    SELECT p.first.1 AS mj, p.first.2 AS site, toUnixTimestamp(toStartOfMinute(p.second)) AS minute,
           ON_IT_P, if(isNull(u.second), '', TENANT_P) AS tenant  -- energy without usage: nobody's
    FROM p LEFT JOIN u ON p.gpu_uuid = u.gpu_uuid AND p.second = u.second LEFT JOIN c ON p.gpu_uuid = c.gpu_uuid
    WHERE NOT arrayExists(x -> x.8, on_it)
)
GROUP BY tenant, site, minute
SETTINGS join_use_nulls = 1
""".replace("ON_IT_U", _ON_IT.replace("SECOND", "u.second")).replace(
    "ON_IT_P", _ON_IT.replace("SECOND", "p.second")).replace(
    "TENANT_U", _CORRECTED_TENANT.replace("READING", "u.first.1")).replace(
    "TENANT_P", _CORRECTED_TENANT.replace("READING", "ifNull(u.first.1, '')"))
_PERIOD_SECONDS = "second >= toDateTime({lo:UInt32}, 'UTC') AND second < toDateTime({hi:UInt32}, 'UTC')"
_AROUND_PERIOD = (f"second >= toDateTime({{lo:UInt32}} - {MAX_GAP_S}, 'UTC') "
                  f"AND second < toDateTime({{hi:UInt32}} + {MAX_GAP_S}, 'UTC')")


def raw_sql(hours: Iterable[int] | None = None) -> str:
    """The raw side's statement for the period [lo, hi) (parameters), or only for its seconds in `hours`."""
    where = _PERIOD_SECONDS if hours is None else f"{_PERIOD_SECONDS} AND ({hours_range(hours)})"
    wide = _AROUND_PERIOD if hours is None else f"{_AROUND_PERIOD} AND ({hours_range(hours, margin=MAX_GAP_S)})"
    return _RAW_TEMPLATE.replace("SECONDS", where).replace("WIDE", wide)


_RAW_SQL = raw_sql()  # the whole period: what `--full` runs

_RATED_SQL = """
SELECT toUnixTimestamp(hour) AS h, stream, tenant, sum(seconds) AS n, sum(energy_mj) AS mj,
       rent_price, rent_per_s, discount_pct, tariff_per_kwh, pue
FROM {source}
WHERE {where}
GROUP BY h, stream, tenant, rent_price, rent_per_s, discount_pct, tariff_per_kwh, pue
"""

# Per hour, a fingerprint of its rows at the rollup grain (count and the sum of a hash of each
# row as text): the same on both sides when the multisets of rows are equal.
_FINGERPRINT = (
    "SELECT toUnixTimestamp(hour) AS h, count() AS n, sum(cityHash64(toString(tuple(tenant, day, stream, gpu_uuid, "
    "instance, gpu_model, site, plan, rent_price, rent_per_s, discount_pct, band, tariff_per_kwh, pue, seconds, "
    "util_sum, energy_mj, measured_mj, minutes, minute_qty)))) AS f FROM ({rows}) GROUP BY h"
)
_PUBLISHED_SQL = (
    "SELECT * FROM rated_hours WHERE period = {period:String} AND (hour, generation) IN "
    "(SELECT hour, max(generation) FROM rollup_runs WHERE period = {period:String} GROUP BY hour)"
)


@dataclass(frozen=True)
class Figures:
    rent_seconds: int = 0
    energy_mj: int = 0
    rent: Decimal = Decimal("0.00")
    electricity: Decimal = Decimal("0.00")


@dataclass(frozen=True)
class ConflictExample:
    reason: str
    stream: str
    gpu_uuid: str
    second: int
    kept_event_id: str
    conflicting_event_id: str
    src_partition: int
    src_offset: int

    def describe(self) -> str:
        """One line: what was refused, where it came from, and which reading was kept."""
        return (f"{self.reason}: {self.stream} {self.conflicting_event_id!r} for {self.gpu_uuid!r} at {_iso_s(self.second)} "
                f"(partition {self.src_partition}, offset {self.src_offset}); kept {self.kept_event_id!r}")


@dataclass(frozen=True)
class Conflicts:
    """The conflicts recorded for a period: how many per reason, and the first few."""

    by_reason: dict[str, int]
    examples: list[ConflictExample]

    @property
    def count(self) -> int:
        return sum(self.by_reason.values())


_CONFLICT_COUNTS_SQL = """
SELECT reason, count() FROM conflicts FINAL
WHERE second >= toDateTime({lo:UInt32}, 'UTC') AND second < toDateTime({hi:UInt32}, 'UTC')
GROUP BY reason ORDER BY reason
"""
_CONFLICT_EXAMPLES_SQL = """
SELECT reason, stream, gpu_uuid, toUnixTimestamp(second), kept_event_id, conflicting_event_id, src_partition, src_offset
FROM conflicts FINAL
WHERE second >= toDateTime({lo:UInt32}, 'UTC') AND second < toDateTime({hi:UInt32}, 'UTC')
ORDER BY second, stream, gpu_uuid, src_partition, src_offset LIMIT {limit:UInt32}
"""


def conflicts_of(db: Any, rules: Any, period: str, *, examples: int = 5) -> Conflicts:
    """The conflicts recorded for readings of `period` (billing-time-zone month): the count
    per reason and the first `examples` in time order."""
    lo, hi = rules.period_bounds(period)
    bounds = {"lo": lo, "hi": hi}
    counts = {str(reason): int(n) for reason, n in db.query(_CONFLICT_COUNTS_SQL, bounds)}
    found = [ConflictExample(str(reason), str(stream), str(gpu), int(second), str(kept), str(conflicting), int(partition),
                             int(offset))
             for reason, stream, gpu, second, kept, conflicting, partition, offset
             in db.query(_CONFLICT_EXAMPLES_SQL, {**bounds, "limit": examples})] if counts else []
    return Conflicts(counts, found)


@dataclass(frozen=True)
class CorrectionConflict:
    """A correction refused because its event_id was first used with other content."""

    event_id: str
    kept_partition: int  # the correction that counts
    kept_offset: int
    src_partition: int  # the one refused
    src_offset: int

    def describe(self) -> str:
        return (f"event_id reused with other content: correction {self.event_id!r} at partition {self.src_partition}, "
                f"offset {self.src_offset} refused; kept the one at partition {self.kept_partition}, "
                f"offset {self.kept_offset}")


@dataclass(frozen=True)
class CorrectionFindings:
    """What the log of corrections holds that does not count: conflicts touching the period and
    dead letters (all of them: a malformed correction may name no period at all)."""

    conflicts: list[CorrectionConflict]
    deadlettered: int


_CORRECTION_CONFLICTS_SQL = """
SELECT k.event_id, k.kept_partition, k.kept_offset, k.src_partition, k.src_offset, k.original,
       toUnixTimestamp(c.from_s), toUnixTimestamp(c.to_s)
FROM (SELECT * FROM correction_conflicts FINAL) AS k
LEFT JOIN (SELECT src_partition, src_offset, from_s, to_s FROM corrections FINAL) AS c
    ON c.src_partition = k.kept_partition AND c.src_offset = k.kept_offset
ORDER BY k.src_partition, k.src_offset
"""


def correction_findings(db: Any, rules: Any, period: str) -> CorrectionFindings:
    """The correction conflicts whose refused or kept correction touches `period` (log position
    order), and how many corrections were dead-lettered (gpu.corrections.v1 in `deadletters`)."""
    lo, hi = rules.period_bounds(period)
    found = []
    for event_id, kp, ko, p, o, original, kept_lo, kept_hi in db.query(_CORRECTION_CONFLICTS_SQL):
        spans = [(int(kept_lo), int(kept_hi)), _span_of(original)]
        if any(a < hi and b > lo for a, b in spans if b):
            found.append(CorrectionConflict(str(event_id), int(kp), int(ko), int(p), int(o)))
    dead = db.query("SELECT count() FROM deadletters FINAL WHERE source_topic = {t:String}", {"t": TOPIC_CORRECTIONS})
    return CorrectionFindings(found, int(dead[0][0]))


def _span_of(original: str) -> tuple[int, int]:
    """[from, to) of a stored correction's message value; (0, 0) when it has none readable."""
    try:
        document = orjson.loads(original)
        return parse_ts(document["from"]), parse_ts(document["to"])
    except (ValueError, KeyError, TypeError):  # orjson's JSONDecodeError and parse_ts's errors are ValueErrors
        return 0, 0


@dataclass(frozen=True)
class Difference:
    tenant: str
    what: str
    raw: Any
    rated: Any


@dataclass(frozen=True)
class Audit:
    """What `audit_period` found, and how much it recomputed."""

    figures: dict[str, Figures]  # per tenant, from the raw readings (from the rollups when retention dropped them)
    differences: list[Difference]
    mode: str  # "full", "incremental", or "rollups" (retention dropped the raw readings)
    hours: int = 0  # hours of the period (and any other hour its rated rows name)
    recomputed: int = 0  # recomputed from the raw readings now
    taken: int = 0  # taken from the last clean audit (reports/audit_hours.py)
    stored: int = 0  # found clean now, kept for the next audit


def audit(db: Any, rules: Any, period: str, *, full: bool = False) -> tuple[dict[str, Figures], list[Difference]]:
    """(figures per tenant from the raw readings, differences against the rated data and rollups):
    `audit_period`'s figures and differences."""
    found = audit_period(db, rules, period, full=full)
    return found.figures, found.differences


def audit_period(db: Any, rules: Any, period: str, *, full: bool = False) -> Audit:
    """Audit `period`: the raw side against the rated side per tenant, and every rollup.

    Incremental (the default): the hours whose prints, rules and audit version are those of their
    last clean audit are taken from it (their exact per-tenant figures), the others recomputed —
    all of them the first time. `full` recomputes every hour. Either way the figures of all hours
    are summed exactly and rounded once per tenant, and compared as they always were; the hours
    recomputed and found clean (raw equals rated per tenant exactly, rollup equals its per-second
    rows) are stored with the prints taken before anything was read, so a write during the audit
    makes its hour differ from the stored print and be recomputed next time. An hour that
    differs is not stored.

    For a period whose per-second rows retention dropped (after archiving and verifying them)
    the figures are the rollups' and the only check left is for rows written after the drop."""
    lo, hi = rules.period_bounds(period)
    cov = coverage(db, rules, period)
    if period in retained_periods(db):  # the raw readings are in the verified archive, no longer here
        rated = _rated_by_hour(db, source_of(cov, rules), None)
        return Audit(_rounded(_total(rated.values())), rollup_differences(db, rules, cov), "rollups")
    generation = int(db.query("SELECT toUnixTimestamp64Nano(now64(9))")[0][0])
    prints = hour_prints(db, cov, lo, hi)  # first: what is stored must be what was there before the reads
    taken = {} if full else clean_hours(db, rules, period, prints)
    again = sorted(set(prints) - set(taken))
    every = full or not taken  # the whole period: the statements of today, no list of hours
    raw = _raw_by_hour(db, rules, lo, hi, None if every else again)
    rated = _rated_by_hour(db, source_of(cov, rules), None if every else again)
    rollups = _rollups_differing(db, rules, cov, None if every else again)
    clean = {h: (prints[h], raw.get(h, {})) for h in again
             if h not in rollups and _same(raw.get(h, {}), rated.get(h, {}))}
    store_clean_hours(db, rules, period, generation, clean)

    raw_total = _rounded(_total([*taken.values(), *(raw.get(h, {}) for h in again)]))
    rated_total = _rounded(_total([*taken.values(), *(rated.get(h, {}) for h in again)]))
    differences = [Difference("", f"rollup of hour {_iso(h)}", f"{a[0]} groups", f"{b[0]} groups")
                   for h, (a, b) in sorted(rollups.items())]
    for tenant in sorted(set(raw_total) | set(rated_total)):
        a, b = raw_total.get(tenant, Figures()), rated_total.get(tenant, Figures())
        for what in ("rent_seconds", "energy_mj", "rent", "electricity"):
            if getattr(a, what) != getattr(b, what):
                differences.append(Difference(tenant, what, getattr(a, what), getattr(b, what)))
    return Audit(raw_total, differences, "full" if full else "incremental", len(prints), len(again), len(taken),
                 len(clean))


def _raw_by_hour(db: Any, rules: Any, lo: int, hi: int, hours: list[int] | None) -> dict[int, HourFigures]:
    """Per hour and tenant, the exact figures of the raw readings (corrections applied) of `hours`
    (None: the whole period), each minute priced by the rules in force at it."""
    out: dict[int, dict[str, Exact]] = defaultdict(lambda: defaultdict(Exact))
    if hours is not None and not hours:
        return out
    for stream, tenant, model, site, minute, n, mj in db.query(raw_sql(hours), {"lo": lo, "hi": hi}):
        hour = int(minute) - int(minute) % 3600
        if stream == "rent":
            out[hour][tenant] += Exact(int(n), 0, rules.rent_rate(tenant, model, int(minute)).cost(int(n)))
        else:
            out[hour][tenant] += Exact(0, int(mj), Fraction(0), rules.energy_rate(site, int(minute)).cost(int(mj)))
    return out


def _rated_by_hour(db: Any, source: tuple[str, dict], hours: list[int] | None) -> dict[int, HourFigures]:
    """Per hour and tenant, the exact figures of the rated data as every report reads it (usage.rated)."""
    out: dict[int, dict[str, Exact]] = defaultdict(lambda: defaultdict(Exact))
    if hours is not None and not hours:
        return out
    where = "1" if hours is None else hours_range(hours, "hour")
    for h, stream, tenant, n, mj, price, per_s, pct, tariff, pue in db.query(
            _RATED_SQL.format(source=source[0], where=where), source[1]):
        if stream == "rent":
            out[int(h)][tenant] += Exact(int(n), 0, rent_amount(int(n), price, int(per_s), pct))
        else:
            out[int(h)][tenant] += Exact(0, int(mj), Fraction(0), energy_amount(int(mj), pue, tariff))
    return out


def rollup_differences(db: Any, rules: Any, cov: Coverage) -> list[Difference]:
    """Every rolled-up hour whose published rows differ from the per-second rows' grouping now,
    and every hour written after retention dropped its period (not billed)."""
    differences = [Difference("", f"hour {_iso(h)} written after retention", "rows written", "not billed")
                   for h in cov.frozen]
    if cov.period in retained_periods(db):
        return differences  # the per-second rows are archived; `gpubill archive verify` checks them
    return differences + [Difference("", f"rollup of hour {_iso(h)}", f"{a[0]} groups", f"{b[0]} groups")
                          for h, (a, b) in sorted(_rollups_differing(db, rules, cov, None).items())]


def _rollups_differing(db: Any, rules: Any, cov: Coverage,
                       hours: list[int] | None) -> dict[int, tuple[tuple[int, int], tuple[int, int]]]:
    """Hours (of `hours`, None: all) read from their rollup whose published rows differ from the
    per-second rows grouped now: hour → ((groups, print) per second, (groups, print) published)."""
    if hours is not None and not hours:
        return {}
    params = {"period": cov.period, "tz": str(rules.billing_tz)}
    skip = f" HAVING h NOT IN ({', '.join(str(int(h)) for h in cov.live)})" if cov.live else ""  # read live anyway
    published, per_second = _PUBLISHED_SQL, grouped_sql("period = {period:String}", minutes=True)
    if hours is not None:
        published += f" AND ({hours_range(hours, 'hour')})"
        per_second = grouped_sql(f"period = {{period:String}} AND ({hours_range(hours)})", minutes=True)
    rolled = {int(h): (int(n), int(f)) for h, n, f in db.query(_FINGERPRINT.format(rows=published) + skip, params)}
    grouped = {int(h): (int(n), int(f)) for h, n, f in db.query(_FINGERPRINT.format(rows=per_second) + skip, params)}
    return {hour: (grouped.get(hour, (0, 0)), rolled.get(hour, (0, 0))) for hour in set(rolled) | set(grouped)
            if grouped.get(hour, (0, 0)) != rolled.get(hour, (0, 0))}


def _same(a: HourFigures, b: HourFigures) -> bool:
    """Equal per tenant, exactly (a tenant with nothing is no tenant)."""
    return ({t: f for t, f in a.items() if not f.is_zero()} == {t: f for t, f in b.items() if not f.is_zero()})


def _total(hours: Iterable[HourFigures]) -> dict[str, Exact]:
    total: dict[str, Exact] = defaultdict(Exact)
    for figures in hours:
        for tenant, f in figures.items():
            total[tenant] += f
    return total


def _rounded(total: dict[str, Exact]) -> dict[str, Figures]:
    """Rounded once per tenant (billing_rules.round_fen): the only rounding of the audit."""
    return {t: Figures(f.rent_seconds, f.energy_mj, round_fen(f.rent), round_fen(f.electricity)) for t, f in total.items()}


def _iso(second: int) -> str:
    return datetime.fromtimestamp(second, timezone.utc).strftime("%Y-%m-%dT%H:%MZ")


def _iso_s(second: int) -> str:
    return datetime.fromtimestamp(second, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
