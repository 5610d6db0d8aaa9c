"""Invoice runs under the invoicing lease, on the embedded ClickHouse: a crash between an
invoice's lines and its header is repaired by the next run, finalized invoices are never
touched, and a run through a server takes, settles and releases the lease.

Rows written directly (no broker): tenant tNN rents one A800-80G card on the hourly plan,
¥3600/h = ¥1/s, for SECONDS[tNN] seconds of March 2026 — so its rent line is ¥SECONDS.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from billing import invoicing
from billing.invoicing import delete_stray_lines, run_period
from billing_rules import load_rules
from schemas.tables import RATED_SECONDS
from tests.chdb_template import migrated_dsn
from warehouse import writes
from warehouse.connection import open_database
from warehouse.writes import stamp_hours

RULES = load_rules(Path(__file__).parents[1] / "e2e" / "rules")
PERIOD = "2026-03"
NOW = datetime(2026, 4, 10, tzinfo=UTC)
LO, _ = RULES.period_bounds(PERIOD)
SECONDS = {"t01": 7, "t02": 30, "t03": 120, "t04": 61, "t05": 3}


def seed_tenants(db: Any, seconds: dict[str, int] = SECONDS, period: str = PERIOD, *, gpu_model: str = "A800-80G",
                 hourly: Decimal = Decimal(3600)) -> None:
    """Rated rent rows: `seconds[tenant]` seconds of one A800 (or `gpu_model` at `hourly` ¥ per hour)
    each from the period's start, at ¥1/s."""
    lo, _ = RULES.period_bounds(period)
    rows = []
    for n, (tenant, count) in enumerate(sorted(seconds.items())):
        for second in range(lo + 3600 * n, lo + 3600 * n + count):  # an hour of its own each
            at = datetime.fromtimestamp(second, UTC)
            row = {c: 0 for c in RATED_SECONDS} | {
                "gpu_uuid": f"GPU-{tenant}", "second": at, "period": period, "tenant": tenant,
                "instance": f"i-{tenant}",
                "site": "gz-guian", "node": "gz-n1", "plan": "hourly", "gpu_model": gpu_model, "stream": "rent",
                "rent_price": hourly, "rent_per_s": 3600, "discount_pct": Decimal(0), "util_pct": Decimal(50),
                "band": "", "tariff_per_kwh": Decimal(0), "pue": Decimal(0), "version": 1, "measured": 0, "rated_at": at,
                "src_partition": 0, "src_offset": second}
            rows.append([row[c] for c in RATED_SECONDS])
    db.insert("rated_seconds", rows, RATED_SECONDS)
    stamp_hours(db, {(period, (lo + 3600 * n) // 3600 * 3600) for n in range(len(seconds))})
    time.sleep(0.01)  # a rollup starts strictly after the writes' stamps


def invoices_as_stored(db: Any, period: str = PERIOD) -> dict:
    """Every header and line row as stored (no FINAL: a row written twice shows twice)."""
    headers = db.query("SELECT tenant, number, seq, subtotal FROM invoices WHERE period = {p:String} ORDER BY number",
                       {"p": period})
    lines = db.query("SELECT tenant, number, line_no, kind, amount FROM invoice_lines WHERE period = {p:String} "
                     "ORDER BY number, line_no", {"p": period})
    return {"headers": [tuple(r) for r in headers], "lines": [tuple(r) for r in lines]}


def assert_invoiced_once_gap_free(db: Any, seconds: dict[str, int] = SECONDS, period: str = PERIOD) -> None:
    stored = invoices_as_stored(db, period)
    tenants = sorted(seconds)
    # one header per tenant, numbered 1..n without gaps, the subtotal its rent (¥1/s)
    assert sorted(h[0] for h in stored["headers"]) == tenants
    assert [h[2] for h in stored["headers"]] == list(range(1, len(tenants) + 1))
    assert [h[1] for h in stored["headers"]] == [f"GB-2026-{n:06d}" for n in range(1, len(tenants) + 1)]
    assert {h[0]: h[3] for h in stored["headers"]} == {t: Decimal(seconds[t]) for t in tenants}
    # one rent line per invoice, under its header's number; nothing else left behind
    number_of = {h[0]: h[1] for h in stored["headers"]}
    rent = [(t, n, amount) for t, n, _, kind, amount in stored["lines"] if kind == "rent"]
    assert sorted(rent) == sorted((t, number_of[t], Decimal(seconds[t])) for t in tenants)
    assert all(number_of.get(t) == n for t, n, *_ in stored["lines"])
    assert len({(n, no) for _, n, no, *_ in stored["lines"]}) == len(stored["lines"])  # no line twice
    assert delete_stray_lines(db) == []


@pytest.fixture
def db(tmp_path):
    with open_database(migrated_dsn(tmp_path / 'ch')) as database:
        yield database


@pytest.fixture(autouse=True)
def no_margin(monkeypatch):
    monkeypatch.setattr(writes, "MARGIN_S", 0)


class Killed(BaseException):
    """kill -9 at the failpoint: nothing after it runs (not even `except Exception`)."""


def test_a_crash_between_lines_and_header_is_repaired_by_the_next_run(db, monkeypatch):
    seed_tenants(db)
    reached = []

    def die_at_the_third_header() -> None:
        reached.append(1)
        if len(reached) == 3:
            raise Killed

    monkeypatch.setattr(invoicing, "_pause_before_header", die_at_the_third_header)
    with pytest.raises(Killed):
        run_period(db, RULES, PERIOD, now=NOW, batch=1)  # one invoice per transaction (GPUBILL_BOOKS_BATCH=1)
    crashed = invoices_as_stored(db)
    # t01 and t02 finalized; t03's invoice was not recorded (its fact is the commit point, issue 37):
    # not a line of it was written
    assert [h[:2] for h in crashed["headers"]] == [("t01", "GB-2026-000001"), ("t02", "GB-2026-000002")]
    assert not [line for line in crashed["lines"] if line[0] == "t03"]

    monkeypatch.undo()
    monkeypatch.setattr(writes, "MARGIN_S", 0)
    report = run_period(db, RULES, PERIOD, now=NOW)
    assert (report.existing, report.created) == (
        ["GB-2026-000001", "GB-2026-000002"], ["GB-2026-000003", "GB-2026-000004", "GB-2026-000005"])
    assert_invoiced_once_gap_free(db)
    # and the two invoices finalized before the crash are as they were, row for row
    after = invoices_as_stored(db)
    assert [h for h in after["headers"] if h[0] in ("t01", "t02")] == crashed["headers"]
    kept = ("t01", "t02")
    assert [x for x in after["lines"] if x[0] in kept] == [x for x in crashed["lines"] if x[0] in kept]


def test_leftovers_of_any_period_are_deleted_and_finalized_invoices_kept(db):
    seed_tenants(db)
    run_period(db, RULES, PERIOD, now=NOW)
    before = invoices_as_stored(db)
    # an April run that crashed: a credit line under an unused number (it would count as credit
    # spent), and a line under t01's March number but for April (same number, not its invoice)
    columns = ["id", "revision", "number", "tenant", "period", "line_no", "kind", "description", "quantity", "unit",
               "unit_price", "amount", "exact_amount"]
    db.insert("invoice_lines", [
        ["GB-2026-000006", 1, "GB-2026-000006", "t01", "2026-04", 1, "credit", "trial", Decimal(-1), "", Decimal(0),
         Decimal("-5.00"), "-5"],
        ["GB-2026-000001", 1, "GB-2026-000001", "t01", "2026-04", 2, "rent", "x", Decimal(1), "h", Decimal(1),
         Decimal("1.00"), "1"],
    ], columns)
    assert sorted(delete_stray_lines(db)) == [("GB-2026-000001", 1, "t01", "2026-04"),
                                              ("GB-2026-000006", 1, "t01", "2026-04")]
    assert db.query("SELECT count() FROM invoice_lines WHERE period = '2026-04'")[0][0] == 0
    assert invoices_as_stored(db) == before
    rerun = run_period(db, RULES, PERIOD, now=NOW)  # and a re-run changes nothing
    assert rerun.created == [] and invoices_as_stored(db) == before


class ThroughAServer:
    """The embedded database, seen as a server: run_period takes the lease of rows."""

    embedded = False

    def __init__(self, db: Any) -> None:
        self._db = db

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def test_a_run_through_a_server_takes_the_lease_once_and_releases_it(db):
    seed_tenants(db)
    started = time.monotonic()
    report = run_period(ThroughAServer(db), RULES, PERIOD, now=NOW)
    elapsed_s = time.monotonic() - started
    assert len(report.created) == len(SECONDS)
    assert_invoiced_once_gap_free(db)
    rows = db.query("SELECT holder, state FROM invoice_locks ORDER BY claimed_at")
    assert [state for _, state in rows] == ["claimed", "released"] and rows[0][0] == rows[1][0]
    assert 1.0 <= elapsed_s < 30  # one settle wait of a second, not one per invoice


def test_the_scheduler_postpones_a_period_whose_lease_another_run_holds_too_long(db, monkeypatch, caplog):
    from billing import scheduler
    from billing.invoice_lock import LeaseBusy

    seed_tenants(db)
    calls = []

    def busy(db, rules, period, **kwargs):
        calls.append(period)
        raise LeaseBusy("another invoice run (gpubill invoice run, pid 7 on h) held the invoicing lease for 1800 s")

    monkeypatch.setattr(scheduler, "run_period", busy)
    assert scheduler.run_due(db, RULES, now=NOW) == []
    assert calls == [PERIOD]  # tried, then left for the next hour: not marked as run
    assert "billing run 2026-03 postponed to the next hour" in caplog.text
    monkeypatch.undo()
    monkeypatch.setattr(writes, "MARGIN_S", 0)
    assert [r.period for r in scheduler.run_due(db, RULES, now=NOW)] == [PERIOD]  # the next hour it runs
    assert_invoiced_once_gap_free(db)
