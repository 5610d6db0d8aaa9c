"""Card-hours rated again from their raw readings, as corrected: the batch form of the rater.

Re-rating a period (usage/regenerate.py) and the worker's corrected card-hours rate some
(card, hour)s again from the readings stored in readings_usage and readings_power. They do it
here, in Python, with the definitions the streaming raters use — the rule set's prices
(`RuleSet.rent_rate`, `energy_rate`) and counter energy (billing_rules/counters.py) — instead
of restating them in SQL, so the next pricing rule is written in one place. The rows are the
ones the streaming rater converges to (tests/unit/test_rerating.py holds the two equal):

- the reading that counts for a (card, second) of a stream is the first in partition order;
- a usage reading with a tenant (after corrections) is a rent row;
- a second's energy is its share of `counters.card_energy` over the card's power readings
  (10 s on either side of the hours are read: a second's energy can depend on its
  neighbours), attributed to the usage reading of the same second, site, node, partition
  and offset of the reading that covers it; versions as the rater's (rank, joined, offset).

Corrections (usage/corrections.py, folded per interval by regenerate._fold): a voided usage
reading is no rent and leaves its energy unallocated; a re-attributed one names another
tenant (and instance); voided power takes the energy of its seconds away and nothing else —
its neighbours' intervals stay as the readings say.

    rate_corrected(db, rules, period, run, intervals) -> rows written to rerate_seconds
"""

from __future__ import annotations

from bisect import bisect_left
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from billing_rules.counters import MAX_GAP_S, Sample, card_energy, rank
from billing_rules.errors import BillingRulesError
from warehouse.cluster import mutation_target

__all__ = ["SCRATCH_COLUMNS", "drop_run", "rate_corrected"]

_HOUR = 3600
_NATURAL = (1 << 48) - 1  # the rater's version: _NATURAL − offset (streams/rating/reference.py)
_JOINED = 1 << 50
_RANK_SHIFT = 51
_ZERO = Decimal(0)
SCRATCH_COLUMNS = ("run", "stream", "gpu_uuid", "second", "period", "tenant", "instance", "gpu_model", "site", "node",
                   "plan", "rent_price", "rent_per_s", "discount_pct", "util_pct", "energy_mj", "band",
                   "tariff_per_kwh", "pue", "version", "src_partition", "src_offset", "measured", "rated_at")

_USAGE_SQL = """
SELECT gpu_uuid, toUnixTimestamp(second) AS s,
       argMin(tuple(ifNull(tenant, ''), ifNull(instance, ''), gpu_model, site, node, util_pct, src_partition, src_offset),
              (src_partition, src_offset))
FROM readings_usage WHERE gpu_uuid IN {gpus:Array(String)} AND second >= {lo:UInt32} AND second < {hi:UInt32}
GROUP BY gpu_uuid, s
"""
_POWER_SQL = """
SELECT gpu_uuid, toUnixTimestamp(second) AS s,
       argMin(tuple(power_mw, site, node, src_partition, src_offset, energy_mj, energy_epoch), (src_partition, src_offset))
FROM readings_power WHERE gpu_uuid IN {gpus:Array(String)} AND second >= {lo:UInt32} AND second < {hi:UInt32}
GROUP BY gpu_uuid, s
"""


def rate_corrected(db: Any, rules: Any, period: str, run: int, intervals: list[tuple]) -> int:
    """Rate the corrected card-hours of `intervals` — (gpu, from, to, usage void, reattributed,
    tenant, instance given, instance, power void), covering each corrected card-hour whole — from
    their raw readings into rerate_seconds under `run`; returns the rows written."""
    rows: list[list] = []
    now = datetime.now(UTC)
    lo_p, hi_p = rules.period_bounds(period)
    by_card: dict[str, list[tuple]] = {}
    for interval in intervals:
        by_card.setdefault(interval[0], []).append(interval)
    for gpu, mine in sorted(by_card.items()):
        lo, hi = min(i[1] for i in mine), max(i[2] for i in mine)
        params = {"gpus": [gpu], "lo": max(lo - MAX_GAP_S, 0), "hi": hi + MAX_GAP_S}
        usage = {int(s): f for _, s, f in db.query(_USAGE_SQL, params)}
        power = {int(s): f for _, s, f in db.query(_POWER_SQL, params)}
        shares = card_energy(Sample(s, int(f[0]), int(f[5]) if f[6] else None, f[6] or None) for s, f in power.items())
        seconds = sorted(power)
        for a, b, usage_void, reattr, tenant, has_instance, instance, power_void in (i[1:] for i in mine):
            for second in range(max(a, lo_p), min(b, hi_p)):
                used = None if usage_void else _corrected(usage.get(second), reattr, tenant, has_instance, instance)
                if used is not None and used[0]:
                    rows.append(_rent_row(rules, run, gpu, second, period, used, now))
                share = shares.get(second)
                if share is not None and not power_void:
                    rows.append(_energy_row(rules, run, gpu, second, period, share, power, seconds, used, now))
    rows = [row for row in rows if row is not None]
    if rows:
        db.insert("rerate_seconds", rows, SCRATCH_COLUMNS)
    return len(rows)


def drop_run(db: Any, run: int) -> None:
    db.command(f"DELETE FROM {mutation_target('rerate_seconds', db.cluster)} WHERE run = {{run:UInt64}}", {"run": run})


def _corrected(found: tuple | None, reattr: int, tenant: str, has_instance: int, instance: str) -> tuple | None:
    """The usage reading of a second as corrected: (tenant, instance, model, site, node, util, partition, offset)."""
    if found is None:
        return None
    f = tuple(found)
    if reattr:
        f = (tenant, instance if has_instance else f[1], *f[2:])
    return f


def _rent_row(rules: Any, run: int, gpu: str, second: int, period: str, used: tuple, now: datetime) -> list | None:
    tenant, instance, model, site, node, util, partition, offset = used
    try:
        rate = rules.rent_rate(tenant, model, second)
    except BillingRulesError:  # NoRuleInForce / UnknownModel: nothing to price, as the rater refuses it
        return None
    return [run, "rent", gpu, _dt(second), period, tenant, instance, model, site, node, rate.plan, rate.list_price,
            rate.per_s, rate.discount_pct, util, 0, "", _ZERO, _ZERO, _NATURAL - int(offset), int(partition),
            int(offset), 0, now]


def _energy_row(rules: Any, run: int, gpu: str, second: int, period: str, share: Any, power: dict[int, tuple],
                seconds: list[int], used: tuple | None, now: datetime) -> list | None:
    # The covering reading: the second's own, or the next one (the counter measured the seconds
    # before it); its rank is that of the interval from the reading before it.
    at = bisect_left(seconds, second)
    cover = seconds[at]
    grade = rank(seconds[at - 1] if at else None, cover)
    mw, site, node, partition, offset, _, _ = power[cover]
    try:
        rate = rules.energy_rate(site, second)
    except BillingRulesError:  # a second with no price at its site: no row, as the rater writes none
        return None
    version = (grade << _RANK_SHIFT) + _NATURAL - int(offset)
    if used is not None:
        version += _JOINED
        tenant, instance, model = used[0], used[1], used[2]
    else:
        tenant = instance = model = ""
    return [run, "energy", gpu, _dt(second), period, tenant, instance, model, site, node, "", _ZERO, 0, _ZERO, _ZERO,
            share.energy_mj, rate.band, rate.tariff_per_kwh, rate.pue, version, int(partition), int(offset),
            int(share.measured), now]


def _dt(second: int) -> datetime:
    return datetime.fromtimestamp(second, UTC)
