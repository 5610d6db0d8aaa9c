"""A period's rated data under the current rules and every stored correction: planned, previewed, switched.

    plan(db, rules, period) -> Plan                 what changes, hour by hour (writes only scratch terms)
    new_source(db, rules, plan) -> (sql, params)    the period's rated data as it would be (a usage.rated source)
    regenerate(db, rules, period) -> Regeneration   switch the period's rated data to it
    correct_card_hours(db, rules, hours, corrections)   the live path: readings that arrived after a correction

The rated rows keep the prices they were rated at and the tenant their readings named. A
price correction for the past is an edit of the rule files; a wrong reading is corrected by
an event on gpu.corrections.v1 (usage/corrections.py). Re-rating makes the rated data what
rating the readings under those rules and corrections gives, changing only what differs:

1. **Terms.** Every key of the period's rated data (rent: tenant and model; energy: site)
   in every hour is priced again (`RuleSet.rent_segments`, `energy_segments`), one row per
   piece of constant rate, into the scratch table `rerate_terms` (deleted afterwards). An
   hour changes when a key's terms differ or a rate changes inside it.
2. **At the rollup grain** where it can: an hour whose rates do not change inside it is
   re-priced from its published rollup rows (no per-second row is read); a correction that
   covers whole hours of a card without per-second rows moves (or drops) that card's rows.
3. **From the per-second rows** where it must: an hour with a rate change inside it is
   regrouped from its per-second rows re-priced; a card-hour a correction touches is rated
   again from its raw readings (the batch join of SPEC §4: the first reading per second in
   partition order, power joined to the usage of its second, counter energy), corrected and
   priced by usage/rerating.py with the raters' own definitions (billing_rules), not in SQL. Where
   those rows are gone (retention dropped them, or they never were), the plan refuses in
   one line, naming the verified archive they are in.
4. **The switch.** Per-second rows whose content changes are written again with a higher
   version (ReplacingMergeTree keeps it), rows that no longer count (voided usage, usage
   reattributed to nobody) are deleted; then every changed hour's new rollup rows are
   written under one new generation and published in one insert into `rollup_runs`:
   readers take an hour's published generation (usage/rated.py), so they see the whole
   period old or whole new, never a mix. An hour whose new rows equal its published ones
   is not republished, so a second `regenerate` changes nothing.

Versions: a row written again gets its old version + 1 (or its natural version, when
higher), so it beats the row it replaces, while anything the pipeline learns later (a
usage reading joining unallocated energy: a version ≥ 2**50) still beats it.

    RegenerateRefused(UsageError)   the period cannot be re-rated as asked; nothing was written
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from usage.corrections import Correction, stored_corrections
from usage.failpoints import pause_at
from usage.rated import QUANTITY_NAMES, _GRAIN_NAMES, coverage, grouped_sql, hours_range, rated_source, retained_periods
from usage.rerating import drop_run, rate_corrected
from usage.rollup import drop_superseded, roll_up_hour
from warehouse.cluster import mutation_target
from warehouse.writes import stamp_hours

log = logging.getLogger("gpubill.rerate")

__all__ = ["Plan", "Regeneration", "RegenerateRefused", "correct_card_hours", "new_source", "plan", "regenerate"]

_HOUR = 3600
_TERMS = ("plan", "rent_price", "rent_per_s", "discount_pct", "band", "tariff_per_kwh", "pue")
_TERM_COLUMNS = ("run", "stream", "tenant", "gpu_model", "site", "hour", "lo", "hi", *_TERMS)
_SECONDS_COLUMNS = ("stream, gpu_uuid, second, period, tenant, instance, gpu_model, site, node, plan, rent_price, "
                    "rent_per_s, discount_pct, util_pct, energy_mj, band, tariff_per_kwh, pue, version, src_partition, "
                    "src_offset, rated_at, measured")
_HOURS_COLUMNS = f"{_GRAIN_NAMES}, {QUANTITY_NAMES}, minutes, minute_qty"
_CONTENT = "tuple(tenant, instance, gpu_model, site, node, plan, rent_price, rent_per_s, discount_pct, util_pct, energy_mj, " \
           "band, tariff_per_kwh, pue, measured)"
_FINGERPRINT = (
    "SELECT toUnixTimestamp(hour) AS h, count() AS n, sum(cityHash64(toString(tuple(tenant, day, stream, gpu_uuid, "
    "instance, gpu_model, site, plan, rent_price, rent_per_s, discount_pct, band, tariff_per_kwh, pue, seconds, "
    "util_sum, energy_mj, measured_mj, minutes, minute_qty)))) AS f FROM ({rows}) GROUP BY h"
)
# One interval of a corrected card: (gpu, from, to, usage void, reattributed, tenant, instance given, instance, power void)
_INTERVALS = "Array(Tuple(String, UInt32, UInt32, UInt8, UInt8, String, UInt8, String, UInt8))"


class RegenerateRefused(Exception):
    """A period that cannot be re-rated as asked (one line)."""


@dataclass
class Plan:
    period: str
    run: int
    corrections: list[Correction]
    changed: set[int] = field(default_factory=set)  # hours whose rated data may change
    repriced: set[int] = field(default_factory=set)  # changed hours whose price terms change
    split: set[int] = field(default_factory=set)  # hours with a rate change inside, regrouped from per-second rows
    corrected: set[tuple[str, int]] = field(default_factory=set)  # (gpu, hour) rated again from raw readings
    per_second: set[int] = field(default_factory=set)  # changed hours that have per-second rows
    intervals: list[tuple] = field(default_factory=list)  # per-second corrections, as _INTERVALS
    fixes: list[tuple] = field(default_factory=list)  # whole-hour corrections at the rollup grain, as _INTERVALS
    rules_revision: str = ""

    @property
    def params(self) -> dict:
        return {"period": self.period, "run": self.run, "intervals": self.intervals, "fixes": self.fixes,
                "changed": sorted(self.changed), "split": sorted(self.split),
                "corrected": sorted(self.corrected), "cgpus": sorted({g for g, _ in self.corrected})}


@dataclass
class Regeneration:
    period: str
    generation: int = 0  # 0: nothing changed
    hours: list[int] = field(default_factory=list)  # hours published anew
    seconds_written: int = 0
    seconds_deleted: int = 0
    corrections: int = 0


def plan(db: Any, rules: Any, period: str) -> Plan:
    """What re-rating `period` changes (steps 1 to 3 of the module docstring). Writes the
    scratch terms of its run into `rerate_terms`; `drop_terms` deletes them."""
    lo, hi = rules.period_bounds(period)
    run = int(db.query("SELECT toUnixTimestamp64Nano(now64(9))")[0][0])
    result = Plan(period, run, stored_corrections(db, lo, hi), rules_revision=rules.revision)
    source, params = rated_source(db, rules, period)
    keys = db.query(
        f"SELECT toUnixTimestamp(hour) AS h, stream, if(stream = 'rent', tenant, '') AS t, "
        f"if(stream = 'rent', gpu_model, '') AS m, if(stream = 'energy', site, '') AS s, "
        f"groupUniqArray(tuple({', '.join(_TERMS)})) FROM {source} GROUP BY h, stream, t, m, s", params)
    by_hour: dict[int, list[tuple]] = {}
    for h, stream, tenant, model, site, old in keys:
        by_hour.setdefault(int(h), []).append((str(stream), str(tenant), str(model), str(site), old))
    # Corrections: the hours they touch, and the tenants they bring.
    touched: dict[int, set[str]] = {}
    for c in result.corrections:
        for h in range(max(c.from_s, lo) // _HOUR * _HOUR, min(c.to_s, hi), _HOUR):
            touched.setdefault(h, set()).add(c.gpu_uuid)
    result.changed = set(touched)
    terms: list[list] = []
    for h in sorted(set(by_hour) | set(touched)):
        extra = {(c.tenant, m) for c in result.corrections if c.tenant and h in touched and c.gpu_uuid in touched[h]
                 for m in rules.model_ids}
        hour_terms, changed, split = _hour_terms(rules, run, h, lo, hi, by_hour.get(h, []), extra)
        if changed or h in touched:
            result.changed.add(h)
            terms += hour_terms
        if changed:
            result.repriced.add(h)
        if split:
            result.split.add(h)
    result.per_second = _per_second_hours(db, period, result.changed)
    _place_corrections(result, touched, lo, hi)
    refused = sorted(result.split - result.per_second)
    if refused:
        raise RegenerateRefused(_no_rows(db, period, f"a rate changes inside the hour {_iso(refused[0])}"))
    if terms:
        db.insert("rerate_terms", terms, _TERM_COLUMNS)
    _rate_corrected(db, rules, result)
    return result


def drop_terms(db: Any, run: int) -> None:
    db.command(f"DELETE FROM {mutation_target('rerate_terms', db.cluster)} WHERE run = {{run:UInt64}}", {"run": run})
    drop_run(db, run)


def new_source(db: Any, rules: Any, p: Plan, *, minutes: bool = False) -> tuple[str, dict]:
    """The period's rated data as re-rating makes it: unchanged hours as they are read now,
    changed hours as `_new_rows` builds them (a usage.rated source, rollup grain)."""
    source, params = rated_source(db, rules, p.period, minutes=minutes)
    columns = _HOURS_COLUMNS if minutes else f"{_GRAIN_NAMES}, {QUANTITY_NAMES}"
    if not p.changed:
        return source, params
    sql = (f"(SELECT {columns} FROM {source} WHERE toUnixTimestamp(hour) NOT IN {{changed:Array(UInt32)}} "
           f"UNION ALL SELECT {columns} FROM ({_new_rows(db, rules, p)}))")
    return sql, {**params, **p.params}


def regenerate(db: Any, rules: Any, period: str, *, progress: Any = None) -> Regeneration:
    """Switch `period`'s rated data to the re-rated generation (step 4); idempotent. The caller
    holds the invoicing lease (billing/rerate.py) so no invoice is built from a half-switched period."""
    say = progress or (lambda _msg: None)
    tz = str(rules.billing_tz)
    if period not in retained_periods(db):
        for hour in coverage(db, rules, period).live:  # publish every hour first: the switch compares rollups
            roll_up_hour(db, tz, period, hour)
    p = plan(db, rules, period)
    out = Regeneration(period, corrections=len(p.corrections))
    try:
        if not p.changed:
            return out
        params = {**p.params, "tz": tz}
        if p.per_second:
            say(f"re-writing the per-second rows of {len(p.per_second)} hours")
            out.seconds_written, out.seconds_deleted = _rewrite_seconds(db, rules, p, params)
        generation, started_at = db.query("SELECT toUnixTimestamp64Nano(now64(9)), now64(3, 'UTC')")[0]
        rows = _new_rows(db, rules, p)
        current, _ = rated_source(db, rules, period, minutes=True)
        wanted = {int(h): (int(n), int(f)) for h, n, f in db.query(_FINGERPRINT.format(rows=rows), params)}
        now_rows = {int(h): (int(n), int(f)) for h, n, f in db.query(
            _FINGERPRINT.format(rows=f"SELECT * FROM {current} WHERE toUnixTimestamp(hour) IN {{changed:Array(UInt32)}}"),
            params)}
        out.hours = sorted(h for h in p.changed if wanted.get(h, (0, 0)) != now_rows.get(h, (0, 0)))
        if not out.hours:
            return out
        say(f"publishing {len(out.hours)} hours anew")
        pause_at("rerate-publish")  # usage/failpoints.py: per-second rows re-written, nothing published yet
        db.command(f"INSERT INTO rated_hours ({_HOURS_COLUMNS}, generation) SELECT *, {int(generation)} FROM ({rows}) "
                   "WHERE toUnixTimestamp(hour) IN {publish:Array(UInt32)}", {**params, "publish": out.hours})
        counts = {int(h): (int(n), int(s or 0), int(e or 0)) for h, n, s, e in db.query(
            "SELECT toUnixTimestamp(hour), count(), sum(seconds), sum(energy_mj) FROM rated_hours "
            "WHERE period = {period:String} AND generation = {g:UInt64} GROUP BY hour",
            {"period": period, "g": int(generation)})}
        db.insert("rollup_runs", [[period, datetime.fromtimestamp(h, UTC), int(generation), started_at, tz,
                                   *counts.get(h, (0, 0, 0)), [p.rules_revision]] for h in out.hours],
                  ["period", "hour", "generation", "started_at", "billing_tz", "rows", "seconds", "energy_mj",
                   "rules_revisions"])
        out.generation = int(generation)
        drop_superseded(db, [period])
        db.insert("rerate_runs", [[period, out.generation, p.rules_revision, len(p.corrections), len(out.hours),
                                   out.seconds_written, out.seconds_deleted, started_at, datetime.now(UTC)]],
                  ["period", "generation", "rules_revision", "corrections", "hours", "seconds_written",
                   "seconds_deleted", "started_at", "finished_at"])
        log.info("re-rated %s under rules %s: %d hours published anew (generation %d), %d per-second rows "
                 "written, %d deleted", period, p.rules_revision, len(out.hours), out.generation,
                 out.seconds_written, out.seconds_deleted)
        return out
    finally:
        drop_terms(db, p.run)


def correct_card_hours(db: Any, rules: Any, hours: list[tuple[str, int]], corrections: list[Correction]) -> int:
    """Rate again, as corrected, the card-hours among `hours` ((period, UTC hour) a batch of the
    worker just wrote) that `corrections` touch: a reading that arrives after a correction
    covering its second is rated as corrected. The per-second rows are re-written (step 3 of
    the module docstring, from the raw readings) and their hours stamped as written, so reads
    take them from the per-second rows until the rollup rolls them up again. Returns the rows
    re-written or deleted; nothing is read when no correction touches `hours`."""
    done = 0
    by_period: dict[str, set[int]] = {}
    for period, hour in hours:
        by_period.setdefault(period, set()).add(int(hour))
    for period, mine in sorted(by_period.items()):
        touched: dict[int, set[str]] = {}
        for c in corrections:
            for h in mine:
                if c.from_s < h + _HOUR and c.to_s > h:
                    touched.setdefault(h, set()).add(c.gpu_uuid)
        if not touched:
            continue
        lo, hi = rules.period_bounds(period)
        run = int(db.query("SELECT toUnixTimestamp64Nano(now64(9))")[0][0])
        gpus = sorted({g for gs in touched.values() for g in gs})
        p = Plan(period, run, [c for c in corrections if c.gpu_uuid in gpus], per_second=set(touched),
                 rules_revision=rules.revision)
        _place_corrections(p, touched, lo, hi)
        where = hours_range(touched)
        tenants = {str(t) for (t,) in db.query(
            f"SELECT DISTINCT ifNull(tenant, '') FROM readings_usage WHERE gpu_uuid IN {{g:Array(String)}} AND ({where})",
            {"g": gpus})} | {c.tenant for c in p.corrections if c.tenant}
        terms = []
        for h in sorted(touched):
            keys = [("rent", t, m, "", None) for t in sorted(tenants - {""}) for m in rules.model_ids]
            keys += [("energy", "", "", site, None) for site in rules.site_ids]
            terms += _hour_terms(rules, run, h, lo, hi, keys, set())[0]
        try:
            db.insert("rerate_terms", terms, _TERM_COLUMNS)
            _rate_corrected(db, rules, p)
            written, deleted = _rewrite_seconds(db, rules, p, {**p.params, "tz": str(rules.billing_tz)}, prices=False)
        finally:
            drop_terms(db, run)
        if written or deleted:
            stamp_hours(db, {(period, h) for h in touched}, revision=rules.revision)
            log.info("rated %d rows of %s again as corrected (a reading arrived after a correction covering it)",
                     written + deleted, period)
        done += written + deleted
    return done


# -- the plan's pieces ---------------------------------------------------------------------

def _hour_terms(rules: Any, run: int, h: int, lo: int, hi: int, keys: list[tuple],
                extra: set[tuple[str, str]]) -> tuple[list[list], bool, bool]:
    """The terms rows of hour `h` for its keys (and the rent of `extra` (tenant, model) pairs a
    correction brings), whether any key's terms change, and whether a rate changes inside it."""
    start, end = max(h, lo), min(h + _HOUR, hi)
    rows, changed, split = [], False, False
    seen = set()
    wanted = [(s, t, m, site, old) for s, t, m, site, old in keys]
    wanted += [("rent", t, m, "", None) for t, m in sorted(extra) if ("rent", t, m) not in
               {(s, tt, mm) for s, tt, mm, _, _ in keys}]
    for stream, tenant, model, site, old in wanted:
        if (stream, tenant, model, site) in seen:
            continue
        seen.add((stream, tenant, model, site))
        try:
            pieces = [(a, b, _rent_terms(rate)) for a, b, rate in rules.rent_segments(tenant, model, start, end)] \
                if stream == "rent" else \
                [(a, b, _energy_terms(rate)) for a, b, rate in rules.energy_segments(site, start, end)]
        except Exception as exc:  # billing_rules' NoRuleInForce / UnknownModel / UnknownSite
            if old is None:
                continue  # a model the card may not have: nothing to price
            raise RegenerateRefused(f"the rules cannot price {stream} of {tenant or site} {model} at {_iso(h)}: {exc}") \
                from None
        if len(pieces) > 1:
            split = True
        if old is not None and (len(pieces) > 1 or {_normal(t) for t in old} != {pieces[0][2]}):
            changed = True
        for a, b, t in pieces:
            rows.append([run, stream, tenant, model, site, _dt(h), _dt(a), _dt(b), *t])
    return rows, changed, split


def _rent_terms(rate: Any) -> tuple:
    return (rate.plan, _dec(rate.list_price), int(rate.per_s), _dec(rate.discount_pct), "", _dec(0), _dec(0))


def _energy_terms(rate: Any) -> tuple:
    return ("", _dec(0), 0, _dec(0), rate.band, _dec(rate.tariff_per_kwh), _dec(rate.pue))


def _normal(terms: tuple) -> tuple:
    plan_, price, per_s, pct, band, tariff, pue = terms
    return (str(plan_), _dec(price), int(per_s), _dec(pct), str(band), _dec(tariff), _dec(pue))


def _dec(value: Any) -> Decimal:
    return Decimal(value)


def _per_second_hours(db: Any, period: str, hours: set[int]) -> set[int]:
    if not hours or period in retained_periods(db):
        return set()
    where = hours_range(hours)  # consecutive hours as one range: a range per hour made this 100× slower
    return {int(h) for (h,) in db.query(
        f"SELECT DISTINCT toUnixTimestamp(toStartOfHour(second)) FROM rated_seconds WHERE period = {{p:String}} "
        f"AND ({where})", {"p": period})}


def _place_corrections(p: Plan, touched: dict[int, set[str]], lo: int, hi: int) -> None:
    """Each corrected card-hour: rated again from raw readings (hours with per-second rows), or
    its rollup rows moved (whole hours without them); refused when neither can be done."""
    by_card: dict[str, list[Correction]] = {}
    for c in p.corrections:
        by_card.setdefault(c.gpu_uuid, []).append(c)
    for gpu, mine in by_card.items():
        hours = sorted(h for h, gpus in touched.items() if gpu in gpus)
        edges = sorted({h for h in hours} | {h + _HOUR for h in hours}
                       | {min(max(c.from_s, lo), hi) for c in mine} | {min(max(c.to_s, lo), hi) for c in mine})
        for a, b in zip(edges, edges[1:]):
            h = a // _HOUR * _HOUR
            if h not in touched or gpu not in touched[h] or a >= b:
                continue
            action = _fold([c for c in mine if c.from_s <= a and b <= c.to_s])
            if h in p.per_second:
                p.corrected.add((gpu, h))
                p.intervals.append((gpu, a, b, *action))
            elif action != _IDENTITY:
                if a != h or b != min(h + _HOUR, hi):
                    raise RegenerateRefused(_no_rows_text(p.period, f"a correction of card {gpu} starts or ends inside "
                                                                    f"the hour {_iso(h)}"))
                p.fixes.append((gpu, h, b, *action))


_IDENTITY = (0, 0, "", 0, "", 0)


def _fold(covering: list[Correction]) -> tuple:
    """(usage void, reattributed, tenant, instance given, instance, power void) after `covering`, in log order."""
    usage_void = reattr = has_instance = power_void = False
    tenant = instance = ""
    for c in covering:
        if c.voids_usage:
            usage_void = True
        if c.voids_power:
            power_void = True
        if c.kind == "reattribute" and not usage_void:
            reattr, tenant = True, c.tenant or ""
            if c.instance is not None:
                has_instance, instance = True, c.instance
    return (int(usage_void), int(reattr), tenant, int(has_instance), instance, int(power_void))


def _no_rows(db: Any, period: str, what: str) -> str:
    return _no_rows_text(period, what, _archive_of(db, period))


def _no_rows_text(period: str, what: str, archive: str = "") -> str:
    where = (f"retention dropped them after archiving to {archive}; re-rating from the archive is not built: "
             f"restore it first") if archive else "the period has none there (rated at the rollup grain only)"
    return f"cannot re-rate {period}: {what} needs the per-second rows, and {where}"


def _archive_of(db: Any, period: str) -> str:
    rows = db.query("SELECT argMax(archive, dropped_at) FROM retention_runs WHERE period = {p:String}", {"p": period})
    return str(rows[0][0]) if rows and rows[0][0] else ""


# -- the SQL of the new rows ---------------------------------------------------------------

_JOIN_TERMS = (
    "INNER JOIN (SELECT * FROM rerate_terms WHERE run = {{run:UInt64}}) AS t ON t.stream = {a}.stream AND t.tenant = if({a}.stream = 'rent', {tenant}, '') "
    "AND t.gpu_model = if({a}.stream = 'rent', {a}.gpu_model, '') AND t.site = if({a}.stream = 'energy', {a}.site, '') "
    "AND t.hour = {hour}"
)


def _new_rows(db: Any, rules: Any, p: Plan) -> str:
    """SELECT of the changed hours' new rows at the rollup grain (columns of rated_hours less generation)."""
    parts = [_mapped_rows(db, rules, p)]
    if p.split:
        parts.append(grouped_sql("toUnixTimestamp(hour) IN {split:Array(UInt32)}", minutes=True,
                                 relation=_repriced_sql("{split:Array(UInt32)}")))
    if p.corrected:
        parts.append(grouped_sql("1", minutes=True, relation=_corrected_sql(p)))
    return " UNION ALL ".join(parts)


def _mapped_rows(db: Any, rules: Any, p: Plan) -> str:
    """Published rows of the changed hours (not regrouped), re-priced, with whole-hour corrections applied."""
    source, _ = rated_source(db, rules, p.period, minutes=True)
    tenant = ("multiIf(f.hit = 0, r.tenant, r.stream = 'rent', if(f.reattr = 1, f.ftenant, r.tenant), f.usage_void = 1, '', "
              "f.reattr = 1 AND r.gpu_model != '', f.ftenant, r.tenant)")
    instance = ("multiIf(f.hit = 0, r.instance, f.usage_void = 1 AND r.stream = 'energy', '', f.reattr = 1 AND "
                "f.has_instance = 1 AND (r.stream = 'rent' OR r.gpu_model != ''), f.finstance, r.instance)")
    model = "if(f.hit = 1 AND f.usage_void = 1 AND r.stream = 'energy', '', r.gpu_model)"
    dropped = ("f.hit = 1 AND ((r.stream = 'rent' AND (f.usage_void = 1 OR (f.reattr = 1 AND f.ftenant = ''))) "
               "OR (r.stream = 'energy' AND f.power_void = 1))")
    return (
        f"SELECT r.period AS period, {tenant} AS tenant, r.hour AS hour, r.day AS day, r.stream AS stream, "
        f"r.gpu_uuid AS gpu_uuid, {instance} AS instance, {model} AS gpu_model, r.site AS site, "
        "t.plan AS plan, t.rent_price AS rent_price, t.rent_per_s AS rent_per_s, t.discount_pct AS discount_pct, "
        "t.band AS band, t.tariff_per_kwh AS tariff_per_kwh, t.pue AS pue, r.seconds AS seconds, "
        "r.util_sum AS util_sum, r.energy_mj AS energy_mj, r.measured_mj AS measured_mj, r.minutes AS minutes, "
        "r.minute_qty AS minute_qty "
        f"FROM (SELECT * FROM {source} WHERE toUnixTimestamp(hour) IN {{changed:Array(UInt32)}} "
        "AND toUnixTimestamp(hour) NOT IN {split:Array(UInt32)} "
        "AND (gpu_uuid, toUnixTimestamp(hour)) NOT IN {corrected:Array(Tuple(String, UInt32))}) AS r "
        "LEFT JOIN (SELECT x.1 AS gpu, toDateTime(x.2, 'UTC') AS fh, x.4 AS usage_void, x.5 AS reattr, x.6 AS ftenant, "
        f"x.7 AS has_instance, x.8 AS finstance, x.9 AS power_void, toUInt8(1) AS hit FROM (SELECT arrayJoin({{fixes:{_INTERVALS}}}) AS x)) AS f "
        "ON f.gpu = r.gpu_uuid AND f.fh = r.hour "
        + _JOIN_TERMS.format(a="r", tenant=tenant, hour="r.hour")
        + f" WHERE NOT ({dropped})"
    )


def _repriced_sql(hours: str, *, where: str = "1") -> str:
    """rated_seconds rows of the period in `hours` (an SQL array), re-priced by the run's terms;
    `repriced` says whether the terms changed. Card-hours rated again from raw readings are left out."""
    columns = ("s.stream AS stream, s.gpu_uuid AS gpu_uuid, s.second AS second, s.period AS period, s.tenant AS tenant, "
               "s.instance AS instance, s.gpu_model AS gpu_model, s.site AS site, s.node AS node, t.plan AS plan, "
               "t.rent_price AS rent_price, t.rent_per_s AS rent_per_s, t.discount_pct AS discount_pct, "
               "s.util_pct AS util_pct, s.energy_mj AS energy_mj, t.band AS band, t.tariff_per_kwh AS tariff_per_kwh, "
               "t.pue AS pue, s.version AS version, s.src_partition AS src_partition, s.src_offset AS src_offset, "
               "s.rated_at AS rated_at, s.measured AS measured, "
               f"tuple({', '.join('s.' + c for c in _TERMS)}) != tuple({', '.join('t.' + c for c in _TERMS)}) AS repriced")
    return (
        f"SELECT {columns} FROM (SELECT * FROM rated_seconds FINAL WHERE period = {{period:String}} "
        f"AND toUnixTimestamp(toStartOfHour(second)) IN {hours}) AS s "
        + _JOIN_TERMS.format(a="s", tenant="s.tenant", hour="toStartOfHour(s.second)")
        + " WHERE s.second >= t.lo AND s.second < t.hi "
        "AND (s.gpu_uuid, toUnixTimestamp(toStartOfHour(s.second))) NOT IN {corrected:Array(Tuple(String, UInt32))} "
        f"AND ({where})"
    )


def _corrected_sql(p: Plan) -> str:
    """The corrected card-hours rated again from their raw readings (rated_seconds' columns):
    the rows usage/rerating.py wrote for the plan's run (`_rate_corrected`)."""
    return f"SELECT {_SECONDS_COLUMNS} FROM rerate_seconds WHERE run = {{run:UInt64}}"


def _rate_corrected(db: Any, rules: Any, p: Plan) -> None:
    """Rate the plan's corrected card-hours from their raw readings into rerate_seconds (the
    scratch rows `_corrected_sql` reads; `drop_terms` deletes them with the run's terms)."""
    if p.corrected:
        rate_corrected(db, rules, p.period, p.run, p.intervals)


def _rewrite_seconds(db: Any, rules: Any, p: Plan, params: dict, *, prices: bool = True) -> tuple[int, int]:
    """Write again the per-second rows whose content changes (re-priced ones unless `prices` is
    False, and the corrected card-hours); delete those that no longer count."""
    written = deleted = 0
    hours = sorted(p.per_second & p.repriced)  # an hour only a correction touches keeps its prices
    repriced = _repriced_sql("{hours:Array(UInt32)}", where="repriced")
    args = {**params, "hours": hours}
    if prices and hours:
        written += int(db.query(f"SELECT count() FROM ({repriced})", args)[0][0])
    if written:
        db.command(f"INSERT INTO rated_seconds ({_SECONDS_COLUMNS}) SELECT stream, gpu_uuid, second, period, tenant, "
                   "instance, gpu_model, site, node, plan, rent_price, rent_per_s, discount_pct, util_pct, energy_mj, "
                   "band, tariff_per_kwh, pue, version + 1, src_partition, src_offset, now64(3, 'UTC'), measured "
                   f"FROM ({repriced})", args)
    if not p.corrected:
        return written, deleted
    target = _corrected_sql(p)
    pairs = "(gpu_uuid, toUnixTimestamp(toStartOfHour(second))) IN {corrected:Array(Tuple(String, UInt32))}"
    old = (f"(SELECT stream AS os, gpu_uuid AS og, second AS osec, version AS oversion, {_CONTENT} AS ocontent, "
           f"toUInt8(1) AS hit FROM rated_seconds FINAL WHERE period = {{period:String}} "
           f"AND gpu_uuid IN {{cgpus:Array(String)}} AND {pairs})")
    changed = (f"FROM ({target}) AS n LEFT JOIN {old} AS o ON o.os = n.stream AND o.og = n.gpu_uuid AND o.osec = n.second "
               f"WHERE o.hit = 0 OR o.ocontent != tuple(n.tenant, n.instance, n.gpu_model, n.site, n.node, n.plan, "
               "n.rent_price, n.rent_per_s, n.discount_pct, n.util_pct, n.energy_mj, n.band, n.tariff_per_kwh, n.pue, n.measured)")
    fresh = int(db.query(f"SELECT count() {changed}", params)[0][0])
    if fresh:
        db.command(f"INSERT INTO rated_seconds ({_SECONDS_COLUMNS}) SELECT n.stream, n.gpu_uuid, n.second, n.period, "
                   "n.tenant, n.instance, n.gpu_model, n.site, n.node, n.plan, n.rent_price, n.rent_per_s, "
                   "n.discount_pct, n.util_pct, n.energy_mj, n.band, n.tariff_per_kwh, n.pue, "
                   "if(o.hit = 1, greatest(o.oversion + 1, n.version), n.version), n.src_partition, n.src_offset, "
                   f"n.rated_at, n.measured {changed}", params)
    gone = (f"period = {{period:String}} AND gpu_uuid IN {{cgpus:Array(String)}} AND {pairs} AND "
            f"(stream, gpu_uuid, second) NOT IN (SELECT stream, gpu_uuid, second FROM ({target}))")
    deleted = int(db.query(f"SELECT count() FROM rated_seconds FINAL WHERE {gone}", params)[0][0])
    if deleted:
        db.command(f"DELETE FROM {mutation_target('rated_seconds', db.cluster)} WHERE {gone}", params)
    return written + fresh, deleted


def _dt(second: int) -> datetime:
    return datetime.fromtimestamp(second, UTC)


def _iso(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%MZ")
