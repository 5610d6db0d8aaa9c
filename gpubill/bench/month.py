"""`gpubill bench month`: a month of a fleet at the operator's size, through the real rollup and commands.

What it builds, in a fresh embedded ClickHouse (chDB) in a temporary directory (`keep` keeps it),
is written where its docstring says what it is: the fleet, its readings and their per-second rows
in gpubill/bench/month_fleet.py; the rollups of the days without per-second rows, and their check
against the real rollup, in gpubill/bench/month_rollups.py. Then:

- **Settling.** After the writes, background merges are let finish and the rollup margin
  (`warehouse.writes.MARGIN_S`, and the 60 s of view v_live_hours) allowed to pass.

What it measures (seconds of wall time; `time.perf_counter`):

- `rollup_s_per_hour`: median over the per-second hours of `roll_up_hour` inside the real
  `roll_up` job, with `SET max_threads = 1` (one core for the query; background merges were
  let settle first); `rollup_cpu_s_per_hour` is the process's CPU time (all of chDB's
  threads) for the same hours; `rollup_s_per_hour_2_threads` one more hour re-rolled with
  ClickHouse's default threads.
- `invoice_run_s`: the books opened as `gpubill invoice run` opens them (the numbered series'
  writer on a private Kafka broker, the projection taken to the log's end, the rule set
  recorded: gpubill/bench/broker.py, gpubill/cli/books.py) and `billing.invoicing.run_period`
  for every tenant, each invoice appended to gpu.books.v1 and projected;
  `invoice_run_books_open_s` the opening alone;
- `cost_share_s`: `cost_share` + `store_cost_share` (`gpubill report cost-share`);
- `usage_report_s`: per format (csv, json, parquet, pdf), `usage_report` + `render_usage`
  for tenant-0, a 64-card tenant (`gpubill report usage`);
- `finance_view_s`: `SELECT * FROM v_usage_by_tenant WHERE period = P`; `finance_view_tenant_s`
  the same for one tenant;
- `audit_first_s`, `audit_incremental_s`, `audit_full_s`: `reports.audit.audit_period` (`gpubill
  audit`) three times in a row — the first with no audit stored (every hour recomputed from the
  raw readings, the clean ones stored), then the incremental audit after it, then `--full`
  (every hour recomputed again). `audit_hours` says per run how many hours it recomputed, took
  from the last clean audit and stored; `audit_differences` how many differences each listed.
  The synthetic days have rollups but no readings, so their hours and every tenant differ:
  those hours are never stored as clean and every run recomputes them (they have no raw rows:
  that costs reading their rollups); the per-second hours agree and are taken the second time.
  `audit_prints_s` is `reports.audit_hours.hour_prints` alone: the grouped scan of the raw and
  rated rows that tells the incremental audit which hours changed;
- `bytes_per_gpu_second`: `bytes_on_disk` of the active parts (`system.parts`) after
  `OPTIMIZE TABLE … FINAL` of every table written, per table: the per-second tables
  divided by their own GPU-seconds (`gpus` × per-second hours × 3600), the rollup tables
  (`rated_hours`, `rollup_runs`, `rated_writes`, `card_models`) by the month's
  (`gpus` × `days` × 86,400); `total` is their sum: hot storage per GPU-second of a month
  kept whole at the per-second grain with its rollups.
"""

from __future__ import annotations

import itertools
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from billing_rules import RuleSet, load_rules
from gpubill.bench.broker import temporary_broker
from gpubill.bench.month_fleet import DAY_S, EXAMPLE_TOU_DIR, HOUR_S, Fleet, Say, iso, make_fleet, write_seconds
from gpubill.bench.month_rollups import synthetic_differences, write_minutes, write_rollups
from gpubill.config import Settings
from gpubill.errors import GpubillError
from usage.rollup import roll_up, roll_up_hour
from warehouse import writes

BROKER_PORT = 28392  # the private broker's (and + 1 its controller's): `gpubill bench month --port`
FORMATS = ("csv", "json", "parquet", "pdf")
PER_SECOND_TABLES = ("rated_seconds", "readings_usage", "readings_power")
ROLLUP_TABLES = ("rated_hours", "rollup_runs", "rated_writes", "card_models")


# -- building the month -------------------------------------------------------------------

def write_month(db: Any, fleet: Fleet, per_second_end: int, month_end: int,
                say: Say = lambda _: None) -> tuple[float, float, float]:
    """Per-second rows of [start, per_second_end), then the rollups they would give for the rest of
    the month up to `month_end`. Returns the seconds each took and the time.monotonic() of the last
    per-second write (the rollup step waits its margin after it)."""
    built = time.perf_counter()
    for hour in range(fleet.start, per_second_end, HOUR_S):
        t0 = time.perf_counter()
        write_seconds(db, fleet, hour, hour + HOUR_S)
        say(f"per-second rows of {iso(hour)}: {time.perf_counter() - t0:.1f} s")
    last_write = time.monotonic()
    build_per_second_s = time.perf_counter() - built

    built = time.perf_counter()
    now_ms = int(time.time() * 1000)
    write_minutes(db, fleet)
    say(f"one day's per-minute sums (bench_minutes): {time.perf_counter() - built:.1f} s")
    if per_second_end < month_end:
        started_ms = now_ms - HOUR_S * 1000
        write_rollups(db, fleet, per_second_end, month_end, generation=started_ms * 1_000_000, started_ms=started_ms,
                      written_ms=now_ms - 2 * HOUR_S * 1000, say=say)
    return build_per_second_s, time.perf_counter() - built, last_write


# -- the run ---------------------------------------------------------------------------------

def bench_month(gpus: int = 1280, days: int = 30, *, per_second_hours: int = 24, period: str = "2026-04",
                tenant_cards: int = 64, rules: RuleSet | None = None, keep: Path | None = None,
                settle_s: float = 900, margin_s: float | None = None, port: int = BROKER_PORT,
                say: Say = lambda _: None) -> dict:
    """Build the month, roll up, run the commands; returns the figures `gpubill bench month --json` prints.

    `settle_s` bounds the wait for background merges before the rollups are timed; `margin_s`
    is the wait after the last per-second write before rolling up (default: the rollup margin,
    warehouse.writes.MARGIN_S, or the 60 s that view v_live_hours allows, whichever is longer, + 1 s).
    The books are on a private broker on `port` (and port + 1), started after the rollups are timed.
    """
    from warehouse.connection import open_database

    rules = rules or load_rules(EXAMPLE_TOU_DIR)
    fleet = make_fleet(rules, period, gpus, tenant_cards=tenant_cards)
    month_end = min(fleet.end, fleet.start + days * DAY_S)
    if days * DAY_S > fleet.end - fleet.start:
        raise GpubillError(f"--days: {period} has {(fleet.end - fleet.start) // DAY_S} days")
    per_second_end = fleet.start + per_second_hours * HOUR_S
    if per_second_hours < 1 or per_second_end > month_end:
        raise GpubillError(f"per-second hours must be 1 … {(month_end - fleet.start) // HOUR_S}")
    if not fleet.pairs:
        raise GpubillError(f"{gpus} cards make no tenant of {tenant_cards} cards: nothing would be invoiced")
    directory = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="gpubill-bench-month-"))
    directory.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    try:
        dsn = f"chdb://{directory.resolve() / 'clickhouse'}"
        with open_database(dsn) as db:
            db.command("SET max_query_size = 67108864")  # the fleet's cards are constant arrays in the SQL
            if margin_s is None:
                margin_s = max(writes.MARGIN_S, 60) + 1
            figures = _run(db, dsn, fleet, per_second_end, month_end, settle_s, margin_s, port, say)
    finally:
        if not keep:
            shutil.rmtree(directory, ignore_errors=True)
    figures["total_s"] = round(time.perf_counter() - began, 1)
    return figures


def _run(db: Any, dsn: str, fleet: Fleet, per_second_end: int, month_end: int, settle_s: float, margin_s: float,
         port: int, say: Say) -> dict:
    rules, period = fleet.rules, fleet.period
    per_second_hours = (per_second_end - fleet.start) // HOUR_S
    say(f"{fleet.gpus:,} cards, {len(fleet.pairs)} (tenant, model) pairs, {period}: per-second rows for "
        f"{per_second_hours} h, rollups to {iso(month_end)}")
    build_per_second_s, build_rollups_s, last_write = write_month(db, fleet, per_second_end, month_end, say)

    say("letting background merges settle")
    settled_s = _settle(db, settle_s)
    if time.monotonic() - last_write < margin_s:
        time.sleep(margin_s - (time.monotonic() - last_write))

    parts = db.query("SELECT count() FROM system.parts WHERE active AND database = currentDatabase() "
                     "AND table = 'rated_seconds'")[0][0]
    say(f"rolling up {per_second_hours} hours with the real rollup step (max_threads = 1; rated_seconds in {parts} parts)")
    marks: list[tuple[float, float]] = []
    db.command("SET max_threads = 1")
    marks.append((time.perf_counter(), time.process_time()))
    report = roll_up(db, rules, period=period, progress=lambda p, h: marks.append((time.perf_counter(), time.process_time())))
    db.command("SET max_threads = 0")
    walls = [b[0] - a[0] for a, b in itertools.pairwise(marks)]
    cpus = [b[1] - a[1] for a, b in itertools.pairwise(marks)]
    if len(report.hours) != per_second_hours:
        raise RuntimeError(f"the rollup rolled up {len(report.hours)} hours, expected {per_second_hours}")
    t0 = time.perf_counter()
    roll_up_hour(db, fleet.tz, period, fleet.start)
    two_threads_s = time.perf_counter() - t0

    say("checking the synthetic rollups against the real rollup of the per-second hours")
    wrong = synthetic_differences(db, fleet, fleet.start, per_second_end)
    if wrong:
        raise RuntimeError(f"synthetic rollups differ from the real rollup in hours {', '.join(iso(h) for h in wrong[:5])}")

    say("OPTIMIZE … FINAL, then bytes per GPU-second")
    t0 = time.perf_counter()
    for table in (*PER_SECOND_TABLES, *ROLLUP_TABLES):
        db.command(f"OPTIMIZE TABLE {table} FINAL")
    optimize_s = time.perf_counter() - t0
    db.command("DROP TABLE IF EXISTS bench_minutes")
    sizes = _sizes(db, fleet, per_second_hours * HOUR_S * fleet.gpus, (month_end - fleet.start) * fleet.gpus)

    figures = {"gpus": fleet.gpus, "days": (month_end - fleet.start) // DAY_S, "per_second_hours": per_second_hours,
               "period": period, "tenants": len({t for t, _ in fleet.pairs})}
    figures["rollup_s_per_hour"] = round(statistics.median(walls), 3)
    figures["rollup_cpu_s_per_hour"] = round(statistics.median(cpus), 3)
    figures["rollup_s_per_hour_2_threads"] = round(two_threads_s, 3)
    figures["rated_seconds_parts_at_rollup"] = int(parts)
    with temporary_broker(port, dsn, rules=EXAMPLE_TOU_DIR, group="bench-month", say=say) as settings:
        figures.update(_reads(db, settings, fleet, say))
    figures["bytes_per_gpu_second"] = sizes["per_gpu_second"]
    figures["rows"] = sizes["rows"]
    figures["disk_gb"] = sizes["disk_gb"]
    figures["build_per_second_s"] = round(build_per_second_s, 1)
    figures["build_rollups_s"] = round(build_rollups_s, 1)
    figures["settle_s"] = round(settled_s, 1)
    figures["optimize_s"] = round(optimize_s, 1)
    return figures


def _reads(db: Any, settings: Settings, fleet: Fleet, say: Say) -> dict:
    """Time the commands' functions on the month (the invoice run on the books of `settings`' broker)."""
    from reports.audit import audit_period
    from reports.audit_hours import hour_prints
    from usage.rated import coverage
    from reports.cost_share import cost_share, store_cost_share
    from billing.invoicing import run_period
    from gpubill.cli.books import open_books
    from reports.render import render_usage
    from reports.usage_report import usage_report
    from warehouse.errors import DatabaseError

    rules, period = fleet.rules, fleet.period
    tenant = fleet.pairs[0][0]
    figures: dict[str, Any] = {}

    say("invoice run for every tenant, on the books")
    t0 = time.perf_counter()
    with open_books(db, settings, numbered=True, rules=rules):  # as `gpubill invoice run` opens them
        figures["invoice_run_books_open_s"] = round(time.perf_counter() - t0, 3)
        run = run_period(db, rules, period)
    figures["invoice_run_s"] = round(time.perf_counter() - t0, 3)
    figures["invoices"] = len(run.created)

    say("cost share")
    t0 = time.perf_counter()
    rows = cost_share(db, rules, period)
    store_cost_share(db, period, rows)
    figures["cost_share_s"] = round(time.perf_counter() - t0, 3)

    say(f"usage report of {tenant}, each format")
    figures["usage_report_s"] = {}
    for fmt in FORMATS:
        t0 = time.perf_counter()
        report = usage_report(db, rules, tenant, period)
        render_usage(report, fmt)
        figures["usage_report_s"][fmt] = round(time.perf_counter() - t0, 3)
    figures["usage_report_rows"] = len(report.rows)

    say("finance's view v_usage_by_tenant")
    t0 = time.perf_counter()
    view = db.query("SELECT * FROM v_usage_by_tenant WHERE period = {p:String}", {"p": period})
    figures["finance_view_s"] = round(time.perf_counter() - t0, 3)
    figures["finance_view_rows"] = len(view)
    t0 = time.perf_counter()
    db.query("SELECT * FROM v_usage_by_tenant WHERE period = {p:String} AND tenant = {t:String}", {"p": period, "t": tenant})
    figures["finance_view_tenant_s"] = round(time.perf_counter() - t0, 3)

    # A query over the limit fails with ClickHouse's error (reported as a figure) instead of
    # the kernel killing the process that holds the database.
    db.command(f"SET max_memory_usage = {_memory_limit()}")
    figures["audit_hours"], figures["audit_differences"] = {}, {}
    for run, full in (("first", False), ("incremental", False), ("full", True)):
        say(f"audit, {run} ({'every hour' if full else 'hours changed since the last clean audit'})")
        t0 = time.perf_counter()
        try:
            found = audit_period(db, rules, period, full=full)
            figures["audit_hours"][run] = {"hours": found.hours, "recomputed": found.recomputed, "taken": found.taken,
                                           "stored": found.stored}
            figures["audit_differences"][run] = len(found.differences)
        except DatabaseError as exc:
            figures[f"audit_{run}_error"] = str(exc)
        figures[f"audit_{run}_s"] = round(time.perf_counter() - t0, 3)
    lo, hi = rules.period_bounds(period)
    t0 = time.perf_counter()
    hour_prints(db, coverage(db, rules, period), lo, hi)
    figures["audit_prints_s"] = round(time.perf_counter() - t0, 3)
    db.command("SET max_memory_usage = 0")
    return figures


def _memory_limit() -> int:
    """Bytes one query may take: 70 % of the machine's memory."""
    import os

    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 0.7)


def _settle(db: Any, limit_s: float) -> float:
    """Wait (up to `limit_s`) until no background merge runs for 3 s in a row; returns the wait."""
    t0, quiet_since = time.monotonic(), None
    while time.monotonic() - t0 < limit_s:
        busy = db.query("SELECT count() FROM system.merges")[0][0]
        if busy:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= 3:
            break
        time.sleep(0.5)
    return time.monotonic() - t0


def _sizes(db: Any, fleet: Fleet, per_second_gpu_s: int, month_gpu_s: int) -> dict:
    """bytes_on_disk of active parts: per table per GPU-second (see the module docstring), rows, GB."""
    tables = (*PER_SECOND_TABLES, *ROLLUP_TABLES)
    parts = {t: (int(b), int(r)) for t, b, r in db.query(
        "SELECT table, sum(bytes_on_disk), sum(rows) FROM system.parts WHERE active AND database = currentDatabase() "
        "AND table IN {tables:Array(String)} GROUP BY table", {"tables": list(tables)})}
    per: dict[str, float] = {}
    for table in tables:
        divisor = per_second_gpu_s if table in PER_SECOND_TABLES else month_gpu_s
        per[table] = parts.get(table, (0, 0))[0] / divisor
    per["total"] = sum(per.values())
    return {
        "per_gpu_second": {t: round(v, 3) for t, v in per.items()},
        "rows": {t: parts.get(t, (0, 0))[1] for t in tables},
        "disk_gb": round(sum(b for b, _ in parts.values()) / 1e9, 2),
    }

