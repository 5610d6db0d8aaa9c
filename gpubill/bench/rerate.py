"""`gpubill bench rerate`: re-rating `bench month`'s month after a price correction and one card-day reattributed.

What it builds is `gpubill bench month`'s month (gpubill/bench/month.py `write_month`,
gpubill/bench/month_fleet.py `make_fleet`): `gpus` cards of April 2026 under the example
time-of-use rules, per-second rows for the first `per_second_hours` hours, rolled up by the
real rollup step, the rest of `days` days as exactly the rollups those rows would give
(`bench month` checks that; this bench does not repeat it). With `keep` the built month
stays in `keep/month` and a later run with the same `keep` and sizes reuses it: each run
re-rates a fresh copy of it in `keep/run` (a re-rating changes the database it runs on).

What it does and times (seconds of wall time, `time.perf_counter`), in this order:

Every money write is on the books (issue 37): each invoice run and the apply open them as
their commands do (`gpubill invoice run`, `gpubill rerate --apply`: the numbered series' writer
on a private Kafka broker, started for the measurement, the rule set in use recorded;
gpubill/bench/broker.py), so their timings include the log.

1. **Before.** `billing.invoicing.run_period` for every tenant (`gpubill invoice run`): the
   first run issues the month's invoices (`invoice_run_first_s`), then `REPEAT` runs more
   that find them issued (`invoice_run_s_before`, their median); `usage_report` +
   `render_usage` of tenant-0, csv (`gpubill report usage`; `usage_report_s_before`, the
   median of `REPEAT`).
2. **A price correction**, as finance makes one: a copy of the rule files with one more
   price version of CORRECTED_MODEL (both plans) from 00:00 of the PRICE_FROM_DAY-th of the
   month in the billing time zone (the last built day when the month is shorter), written
   as TOML text into the catalog; the database is not touched. The rule set's revision
   changes (`rules_revision_before` → `rules_revision_after`).
3. `billing.rerate.rerate_preview` under the corrected rules alone (`dry_run_price_only_s`).
4. **One card-day reattributed**: tenant-0's first card, over the hours with per-second
   rows (the whole first day at full size), moved to tenant-1 and its first instance: a
   `reattribute` document as `gpubill correct reattribute` produces it (schemas/corrections.py,
   `correction_event_id`), checked by `parse_correction` and stored with
   `usage.corrections.store_corrections` as the corrections consumer stores a message.
5. `rerate_preview` under the corrected rules and the correction (`dry_run_s`).
6. `billing.rerate.rerate_apply` (`gpubill rerate --apply`; `apply_s`): the period's rated
   data switched to the new generation, each changed invoice voided by a credit note and
   replaced.
7. **After**, under the corrected rules: the invoice run (`invoice_run_s_after`, median of `REPEAT`) and the usage
   report (`usage_report_s_after`) again, and `*_ratio`: after ÷ before, measured side by
   side in this run.

What it checks (figures, not exceptions, so that a run reports what it found):

- `dry_run_price_only_ok`: the price-only preview differs for exactly the tenants renting
  CORRECTED_MODEL; `dry_run_ok`: with the correction, exactly tenant-0 and tenant-1 differ
  from the price-only preview, tenant-0 down and tenant-1 up, and the tenants that differ
  from what stands are those the two corrections touch (`touched_tenants`);
- after the apply, `second_preview_differences`: tenants a second `rerate_preview` still
  finds a difference for (0 expected); `invoices_voided`, `credit_notes` (reason `rerate`)
  and `replacements` of the period, counted in the database.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from billing_rules import RuleSet, load_rules
from gpubill.bench.broker import temporary_broker
from gpubill.bench.month import _settle, write_month
from gpubill.bench.month_fleet import DAY_S, EXAMPLE_TOU_DIR, HOUR_S, Fleet, Say, make_fleet
from gpubill.config import Settings
from gpubill.errors import GpubillError

__all__ = ["bench_rerate", "corrected_rules_dir", "reattribution"]

CORRECTED_MODEL = "A800-80G"
CORRECTED_PRICE = {"monthly": "3000.00", "hourly": "9.50"}  # from 3,180.00 / 10.00
PRICE_FROM_DAY = 10
FROM_TENANT, TO_TENANT = "tenant-0", "tenant-1"
REPEAT = 3
BROKER_PORT = 28492  # the private broker's (and + 1 its controller's): `gpubill bench rerate --port`
STATE = "bench-rerate.json"  # in `keep`: the sizes of the built month in keep/month


def bench_rerate(gpus: int = 1280, days: int = 30, *, per_second_hours: int = 24, period: str = "2026-04",
                 tenant_cards: int = 64, keep: Path | None = None, settle_s: float = 900,
                 margin_s: float | None = None, port: int = BROKER_PORT, say: Say = lambda _: None) -> dict:
    """Build (or reuse) the month, correct it, re-rate it; returns the figures `gpubill bench rerate --json` prints.

    `settle_s` and `margin_s` as in `bench_month`; the books on a private broker on `port` (and port + 1)."""
    from warehouse import writes
    from warehouse.connection import open_database

    rules = load_rules(EXAMPLE_TOU_DIR)
    fleet = make_fleet(rules, period, gpus, tenant_cards=tenant_cards)
    if days * DAY_S > fleet.end - fleet.start:
        raise GpubillError(f"--days: {period} has {(fleet.end - fleet.start) // DAY_S} days")
    month_end = fleet.start + days * DAY_S
    per_second_end = fleet.start + per_second_hours * HOUR_S
    if per_second_hours < 1 or per_second_end > month_end:
        raise GpubillError(f"per-second hours must be 1 … {days * 24}")
    if len({t for t, _ in fleet.pairs}) < 2:
        raise GpubillError(f"{gpus} cards make fewer than two tenants of {tenant_cards} cards: "
                           "a reattribution needs two")
    if margin_s is None:
        margin_s = max(writes.MARGIN_S, 60) + 1
    sizes = {"gpus": gpus, "days": days, "per_second_hours": per_second_hours, "period": period,
             "tenant_cards": tenant_cards}
    directory = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="gpubill-bench-rerate-"))
    directory.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    figures: dict[str, Any] = {**sizes, "tenants": len({t for t, _ in fleet.pairs})}
    try:
        if keep:
            figures["build_s"] = _kept_month(directory, sizes, fleet, per_second_end, month_end, settle_s, margin_s,
                                             say)
            say(f"copying the month to {directory / 'run'}")
            t0 = time.perf_counter()
            shutil.rmtree(directory / "run", ignore_errors=True)
            shutil.copytree(directory / "month", directory / "run", symlinks=True)
            figures["copy_s"] = round(time.perf_counter() - t0, 1)
            dsn = f"chdb://{(directory / 'run' / 'clickhouse').resolve()}"
            with open_database(dsn) as db, temporary_broker(port, dsn, group="bench-rerate", say=say) as settings:
                figures.update(_measure(db, settings, fleet, per_second_end, month_end, directory, say))
        else:
            dsn = f"chdb://{(directory / 'clickhouse').resolve()}"
            with open_database(dsn) as db:
                t0 = time.perf_counter()
                _build(db, fleet, per_second_end, month_end, settle_s, margin_s, say)
                figures["build_s"] = round(time.perf_counter() - t0, 1)
                with temporary_broker(port, dsn, group="bench-rerate", say=say) as settings:
                    figures.update(_measure(db, settings, fleet, per_second_end, month_end, directory, say))
    finally:
        if not keep:
            shutil.rmtree(directory, ignore_errors=True)
    figures["total_s"] = round(time.perf_counter() - began, 1)
    return figures


# -- the month -----------------------------------------------------------------------------

def _kept_month(directory: Path, sizes: dict, fleet: Fleet, per_second_end: int, month_end: int, settle_s: float,
                margin_s: float, say: Say) -> float | None:
    """keep/month: built now (returns the seconds it took) or reused (None) when built for the same sizes."""
    from warehouse.connection import open_database

    state = directory / STATE
    if state.is_file():
        saved = json.loads(state.read_text())
        if saved == sizes:
            say(f"reusing the month in {directory / 'month'}")
            return None
        raise GpubillError(f"{directory} holds another bench month ({saved}); give another --keep directory")
    shutil.rmtree(directory / "month", ignore_errors=True)
    t0 = time.perf_counter()
    with open_database(f"chdb://{(directory / 'month' / 'clickhouse').resolve()}") as db:
        _build(db, fleet, per_second_end, month_end, settle_s, margin_s, say)
    state.write_text(json.dumps(sizes))
    return round(time.perf_counter() - t0, 1)


def _build(db: Any, fleet: Fleet, per_second_end: int, month_end: int, settle_s: float, margin_s: float,
           say: Say) -> None:
    """`bench month`'s month, rolled up by the real rollup step (see the module docstring)."""
    from usage.rollup import roll_up

    db.command("SET max_query_size = 67108864")  # the fleet's cards are constant arrays in the SQL
    say(f"{fleet.gpus:,} cards, {fleet.period}: per-second rows for {(per_second_end - fleet.start) // HOUR_S} h, "
        f"rollups to {(month_end - fleet.start) // DAY_S} days")
    _, _, last_write = write_month(db, fleet, per_second_end, month_end, say)
    say("letting background merges settle")
    _settle(db, settle_s)
    if time.monotonic() - last_write < margin_s:
        time.sleep(margin_s - (time.monotonic() - last_write))
    say("rolling up the per-second hours (the real rollup step)")
    roll_up(db, fleet.rules, period=fleet.period)
    db.command("DROP TABLE IF EXISTS bench_minutes")


# -- the corrections -----------------------------------------------------------------------

def corrected_rules_dir(rules_dir: Path, into: Path, period: str, day: int) -> Path:
    """A copy of the rule files in `into` with one more price version of CORRECTED_MODEL from 00:00 of
    `day` of `period` (a local date-time: the billing time zone), appended to the catalog as TOML text."""
    into.mkdir(parents=True, exist_ok=True)
    for path in rules_dir.iterdir():
        if path.is_file():
            shutil.copy(path, into / path.name)
    catalog = into / "catalog.toml"
    version = (f"\n# gpubill bench rerate: a price correction for the past\n[[model.{CORRECTED_MODEL}.price]]\n"
               f"effective_from = {period}-{day:02d}T00:00:00\n"
               + "".join(f"{plan} = {price}\n" for plan, price in CORRECTED_PRICE.items()))
    catalog.write_text(catalog.read_text() + version)
    return into


def reattribution(fleet: Fleet, lo: int, hi: int, now_s: int) -> Any:
    """The `reattribute` correction of tenant-0's first card over [lo, hi) to tenant-1's first instance,
    as the corrections consumer reads it off gpu.corrections.v1 (a LoggedCorrection at offset 0)."""
    import orjson

    from schemas.corrections import correction_event_id, parse_correction
    from streams.kafka.corrections import LoggedCorrection

    card = next(c for c in fleet.cards if c.tenant == FROM_TENANT and not c.released)
    target = next(c for c in fleet.cards if c.tenant == TO_TENANT)
    document = {"kind": "reattribute", "gpu_uuid": card.gpu_uuid, "from": _rfc3339(lo), "to": _rfc3339(hi),
                "tenant": TO_TENANT, "instance": target.instance,
                "reason": f"bench rerate: {card.gpu_uuid} was {TO_TENANT}'s, reported under {FROM_TENANT}",
                "author": "gpubill bench rerate"}
    document["event_id"] = correction_event_id(document)
    raw = orjson.dumps(document)
    return LoggedCorrection(partition=card.partition, offset=0, timestamp_ms=now_s * 1000,
                            correction=parse_correction(raw, now_s), status="ok", raw=raw)


def _rfc3339(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- the run ---------------------------------------------------------------------------------

def _measure(db: Any, settings: Settings, fleet: Fleet, per_second_end: int, month_end: int, directory: Path,
             say: Say) -> dict:
    import billing.rerate as rerate
    from usage.corrections import store_corrections

    period, tenant = fleet.period, FROM_TENANT
    figures: dict[str, Any] = {}
    before = settings.model_copy(update={"rules": str(EXAMPLE_TOU_DIR)})

    say("before: invoice run (issues the month), then again, and tenant-0's usage report (csv)")
    figures["invoice_run_first_s"], first = _timed(lambda: _invoice_run(db, before, fleet.rules, period))
    figures["invoices"] = len(first.created)
    figures["invoice_run_s_before"] = _median(lambda: _invoice_run(db, before, fleet.rules, period))
    figures["usage_report_s_before"] = _median(lambda: _usage_csv(db, fleet.rules, tenant, period))

    day = min(PRICE_FROM_DAY, (month_end - fleet.start) // DAY_S)
    corrected_dir = corrected_rules_dir(EXAMPLE_TOU_DIR, directory / "rules", period, day)
    corrected, after = load_rules(corrected_dir), settings.model_copy(update={"rules": str(corrected_dir)})
    figures["price_correction"] = (f"{CORRECTED_MODEL} monthly {CORRECTED_PRICE['monthly']}, hourly "
                                   f"{CORRECTED_PRICE['hourly']} from {period}-{day:02d} 00:00 {fleet.tz}")
    figures["rules_revision_before"], figures["rules_revision_after"] = fleet.rules.revision, corrected.revision
    renting = {t for t, m in fleet.pairs if m == CORRECTED_MODEL}
    touched = renting | {FROM_TENANT, TO_TENANT}
    figures["touched_tenants"] = sorted(touched, key=_tenant_order)

    say(f"dry run under the corrected rules alone (revision {corrected.revision})")
    figures["dry_run_price_only_s"], price_only = _timed(lambda: rerate.rerate_preview(db, corrected, period))
    price_only_by = _differences(price_only)
    figures["dry_run_price_only_ok"] = {t for t, d in price_only_by.items() if d} == renting

    say(f"reattributing one card of {FROM_TENANT} to {TO_TENANT} over the per-second hours")
    span_end = min(fleet.start + DAY_S, per_second_end)
    logged = reattribution(fleet, fleet.start, span_end, int(time.time()))
    store_corrections(db, [logged])
    figures["reattribution"] = {"gpu_uuid": logged.correction.gpu_uuid, "from": logged.correction.from_,
                                "to": logged.correction.to, "event_id": logged.correction.event_id}

    say("dry run under the corrected rules and the correction")
    figures["dry_run_s"], preview = _timed(lambda: rerate.rerate_preview(db, corrected, period))
    by = _differences(preview)
    moved = {t: by.get(t, Decimal(0)) - price_only_by.get(t, Decimal(0)) for t in set(by) | set(price_only_by)}
    figures["dry_run_differences"] = {t: str(by[t]) for t in sorted(by, key=_tenant_order) if by[t]}
    figures["dry_run_reattribution_moves"] = {t: str(d) for t, d in sorted(moved.items()) if d}
    figures["dry_run_ok"] = ({t for t, d in by.items() if d} == touched
                             and {t for t, d in moved.items() if d} == {FROM_TENANT, TO_TENANT}
                             and moved.get(FROM_TENANT, 0) < 0 < moved.get(TO_TENANT, 0))

    say("applying the re-rating")
    figures["apply_s"], _ = _timed(lambda: _apply(db, after, corrected, period, say))
    second = rerate.rerate_preview(db, corrected, period)
    figures["second_preview_differences"] = sum(1 for d in _differences(second).values() if d)
    figures.update(_documents(db, period))

    say("after: invoice run and tenant-0's usage report again")
    figures["invoice_run_s_after"] = _median(lambda: _invoice_run(db, after, corrected, period))
    figures["usage_report_s_after"] = _median(lambda: _usage_csv(db, corrected, tenant, period))
    figures["invoice_run_ratio"] = round(figures["invoice_run_s_after"] / figures["invoice_run_s_before"], 2)
    figures["usage_report_ratio"] = round(figures["usage_report_s_after"] / figures["usage_report_s_before"], 2)
    return figures


def _invoice_run(db: Any, settings: Settings, rules: RuleSet, period: str) -> Any:
    """`gpubill invoice run`: the books opened (numbered, the rule set recorded), every tenant invoiced."""
    from billing.invoicing import run_period
    from gpubill.cli.books import open_books

    with open_books(db, settings, numbered=True, rules=rules):
        return run_period(db, rules, period)


def _apply(db: Any, settings: Settings, rules: RuleSet, period: str, say: Say) -> Any:
    """`gpubill rerate --apply`: the books opened as for an invoice run, the period re-rated."""
    import billing.rerate as rerate
    from gpubill.cli.books import open_books

    with open_books(db, settings, numbered=True, rules=rules):
        return rerate.rerate_apply(db, rules, period, progress=say)


def _usage_csv(db: Any, rules: RuleSet, tenant: str, period: str) -> bytes:
    from reports.render import render_usage
    from reports.usage_report import usage_report

    return render_usage(usage_report(db, rules, tenant, period), "csv")


def _documents(db: Any, period: str) -> dict[str, int]:
    """The period's voided invoices, credit notes of reason `rerate`, and replacements, as stored."""
    voided, replacements = db.query(
        "SELECT countIf(status = 'voided'), countIf(replaces != '') FROM invoices FINAL WHERE period = {p:String}",
        {"p": period})[0]
    notes = db.query("SELECT count() FROM credit_notes FINAL WHERE period = {p:String} AND reason = 'rerate'",
                     {"p": period})[0][0]
    return {"invoices_voided": int(voided), "credit_notes": int(notes), "replacements": int(replacements)}


def _differences(report: Any) -> dict[str, Decimal]:
    return {change.tenant: change.difference for change in report.tenants}


def _tenant_order(tenant: str) -> tuple:
    head, _, number = tenant.rpartition("-")
    return (head, int(number)) if number.isdigit() else (tenant, -1)


def _timed(call: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = call()
    return round(time.perf_counter() - t0, 3), result


def _median(call: Callable[[], Any]) -> float:
    return round(statistics.median(_timed(call)[0] for _ in range(REPEAT)), 3)
