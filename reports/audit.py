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
from typing import Any

import orjson

from billing_rules import energy_amount, rent_amount, round_fen
from schemas.events import parse_ts
from schemas.topics import TOPIC_CORRECTIONS
from usage.rated import Coverage, coverage, grouped_sql, retained_periods, source_of

# What the period's corrections make of a usage reading's tenant (usage/corrections.py), with
# `on_it` the card's corrections covering the second in log order: '' (nobody) when any voids
# the usage (a later reattribute brings nothing back), else the last reattribute's tenant, else
# the reading's. The joins stay out of the WITH: ClickHouse's parser copies a UNION's WITH into
# its later SELECTs, and the gateway (gpubill/devenv/gateway) checks those copies node for node.
_CORRECTED_TENANT = ("if(arrayExists(x -> x.7, on_it), '', if(arrayExists(x -> x.5, on_it), "
                     "arrayLast(x -> x.5, on_it).6, READING))")
_ON_IT = "arrayFilter(x -> x.3 <= toUnixTimestamp(SECOND) AND toUnixTimestamp(SECOND) < x.4, c.cs) AS on_it"

_RAW_SQL = """
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
        WHERE second >= toDateTime({lo:UInt32}, 'UTC') AND second < toDateTime({hi:UInt32}, 'UTC')
        GROUP BY gpu_uuid, second
    ),
    p AS (
        SELECT gpu_uuid, second, argMin(tuple(power_mw, site), (src_partition, src_offset)) AS first
        FROM readings_power
        WHERE second >= toDateTime({lo:UInt32}, 'UTC') AND second < toDateTime({hi:UInt32}, 'UTC')
        GROUP BY gpu_uuid, second
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

_RATED_SQL = """
SELECT stream, tenant, gpu_model, sum(seconds) AS n, sum(energy_mj) AS mj,
       rent_price, rent_per_s, discount_pct, tariff_per_kwh, pue
FROM {source}
GROUP BY stream, tenant, gpu_model, rent_price, rent_per_s, discount_pct, tariff_per_kwh, pue
"""

# Per hour, a fingerprint of its rows at the rollup grain (count and the sum of a hash of each
# row as text): the same on both sides when the multisets of rows are equal.
_FINGERPRINT = (
    "SELECT toUnixTimestamp(hour) AS h, count() AS n, sum(cityHash64(toString(tuple(tenant, day, stream, gpu_uuid, "
    "instance, gpu_model, site, plan, rent_price, rent_per_s, discount_pct, band, tariff_per_kwh, pue, seconds, "
    "util_sum, energy_mj, minutes, minute_qty)))) AS f FROM ({rows}) GROUP BY h"
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


def audit(db: Any, rules: Any, period: str) -> tuple[dict[str, Figures], list[Difference]]:
    """(figures per tenant from the raw readings, differences against the rated data and rollups).

    For a period whose per-second rows retention dropped (after archiving and verifying them)
    the figures are the rollups' and the only check left is for rows written after the drop."""
    lo, hi = rules.period_bounds(period)
    cov = coverage(db, rules, period)
    rated = _rated_figures(db, source_of(cov, rules))
    if period in retained_periods(db):  # the raw readings are in the verified archive, no longer here
        return rated, rollup_differences(db, rules, cov)
    raw = _raw_figures(db, rules, lo, hi)
    differences = rollup_differences(db, rules, cov)
    for tenant in sorted(set(raw) | set(rated)):
        a, b = raw.get(tenant, Figures()), rated.get(tenant, Figures())
        for what in ("rent_seconds", "energy_mj", "rent", "electricity"):
            if getattr(a, what) != getattr(b, what):
                differences.append(Difference(tenant, what, getattr(a, what), getattr(b, what)))
    return raw, differences


def _raw_figures(db: Any, rules: Any, lo: int, hi: int) -> dict[str, Figures]:
    seconds: dict[str, int] = defaultdict(int)
    energy: dict[str, int] = defaultdict(int)
    rent: dict[str, Fraction] = defaultdict(Fraction)
    electricity: dict[str, Fraction] = defaultdict(Fraction)
    for stream, tenant, model, site, minute, n, mj in db.query(_RAW_SQL, {"lo": lo, "hi": hi}):
        if stream == "rent":
            rate = rules.rent_rate(tenant, model, int(minute))
            seconds[tenant] += int(n)
            rent[tenant] += rate.cost(int(n))
        else:
            rate = rules.energy_rate(site, int(minute))
            energy[tenant] += int(mj)
            electricity[tenant] += rate.cost(int(mj))
    return _figures(seconds, energy, rent, electricity)


def rollup_differences(db: Any, rules: Any, cov: Coverage) -> list[Difference]:
    """Every rolled-up hour whose published rows differ from the per-second rows' grouping now,
    and every hour written after retention dropped its period (not billed)."""
    differences = [Difference("", f"hour {_iso(h)} written after retention", "rows written", "not billed")
                   for h in cov.frozen]
    if cov.period in retained_periods(db):
        return differences  # the per-second rows are archived; `gpubill archive verify` checks them
    params = {"period": cov.period, "tz": str(rules.billing_tz)}
    skip = f" HAVING h NOT IN ({', '.join(str(int(h)) for h in cov.live)})" if cov.live else ""  # read live anyway
    rolled = {h: (n, f) for h, n, f in db.query(_FINGERPRINT.format(rows=_PUBLISHED_SQL) + skip, params)}
    per_second = grouped_sql("period = {period:String}", minutes=True)
    grouped = {h: (n, f) for h, n, f in db.query(_FINGERPRINT.format(rows=per_second) + skip, params)}
    for hour in sorted(set(rolled) | set(grouped)):
        a, b = grouped.get(hour, (0, 0)), rolled.get(hour, (0, 0))
        if a != b:
            differences.append(Difference("", f"rollup of hour {_iso(hour)}", f"{a[0]} groups", f"{b[0]} groups"))
    return differences


def _iso(second: int) -> str:
    return datetime.fromtimestamp(second, timezone.utc).strftime("%Y-%m-%dT%H:%MZ")


def _iso_s(second: int) -> str:
    return datetime.fromtimestamp(second, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _rated_figures(db: Any, source: tuple[str, dict]) -> dict[str, Figures]:
    seconds: dict[str, int] = defaultdict(int)
    energy: dict[str, int] = defaultdict(int)
    rent: dict[str, Fraction] = defaultdict(Fraction)
    electricity: dict[str, Fraction] = defaultdict(Fraction)
    for stream, tenant, _, n, mj, price, per_s, pct, tariff, pue in db.query(_RATED_SQL.format(source=source[0]), source[1]):
        if stream == "rent":
            seconds[tenant] += int(n)
            rent[tenant] += rent_amount(int(n), price, int(per_s), pct)
        else:
            energy[tenant] += int(mj)
            electricity[tenant] += energy_amount(int(mj), pue, tariff)
    return _figures(seconds, energy, rent, electricity)


def _figures(seconds, energy, rent, electricity) -> dict[str, Figures]:
    return {
        tenant: Figures(seconds.get(tenant, 0), energy.get(tenant, 0), round_fen(rent.get(tenant, Fraction(0))),
                        round_fen(electricity.get(tenant, Fraction(0))))
        for tenant in set(seconds) | set(energy)
    }
