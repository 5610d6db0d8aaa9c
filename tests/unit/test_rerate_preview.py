"""`gpubill rerate --dry-run` (billing/rerate.py, issue 25 item 3): a period re-priced under
corrected rules, beside the invoices that stand, line by line and exact to the fen; under the
rules that priced it, nothing changes (also with late data adjusted on a later invoice).

Rows are tests/unit/test_invoice_lock_runs.py's: tenant tNN rents one A800 on the hourly plan at
¥3600/h = ¥1/s, from the start of hour N of March 2026 (Asia/Shanghai); unregistered, so no
trial credit; VAT 6 %. The correction: A800 at ¥1800/h (¥0.5/s) from 2026-03-01 00:00:05 local.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from billing.invoicing import run_period
from billing.rerate import rerate_preview
from billing_rules import load_rules
from tests.unit.test_invoice_lifecycle import fen
from tests.unit.test_invoice_lock_runs import NOW, PERIOD, RULES, db, no_margin, seed_tenants  # noqa: F401 (fixtures)

VAT = Fraction(6, 100)


def corrected_rules(tmp_path: Path, effective_from: str = "2026-03-01T00:00:05"):
    directory = tmp_path / "rules"
    shutil.copytree(Path(__file__).parents[1] / "e2e" / "rules", directory)
    catalog = directory / "catalog.toml"
    catalog.write_text(catalog.read_text() + f"""
[[model.A800-80G.price]]
effective_from = {effective_from}
monthly = 3180.00
hourly = 1800.00                  # the corrected rate: ¥0.5 per second
""")
    return load_rules(directory)


def by_tenant(report) -> dict:
    return {t.tenant: t for t in report.tenants}


def test_a_price_corrected_inside_an_hour_is_previewed_to_the_fen(db, tmp_path):
    seed_tenants(db, {"t01": 7, "t02": 30})
    run_period(db, RULES, PERIOD, now=NOW)  # GB-2026-000001 t01 7.00 → 7.42, GB-2026-000002 t02 30.00 → 31.80
    rules = corrected_rules(tmp_path)
    report = rerate_preview(db, rules, PERIOD)
    assert report.rules_revision == rules.revision != RULES.revision
    t01, t02 = by_tenant(report)["t01"], by_tenant(report)["t02"]
    # t01: seconds 0-4 of the month at ¥1 = 5.00, seconds 5-6 at ¥0.5 = 1.00 (the hour is split
    #   from its per-second rows); net 6.00, VAT 0.36, total 6.36
    new_t01 = fen(Fraction(6) * (1 + VAT))
    assert (t01.invoice, t01.status, t01.old_total, t01.new_total) == ("GB-2026-000001", "issued", Decimal("7.42"),
                                                                      new_t01)
    assert t01.difference == new_t01 - Decimal("7.42") == Decimal("-1.06")
    assert [(ln.kind, ln.old_amount, ln.new_amount, ln.new_quantity) for ln in t01.lines] == [
        ("rent", None, Decimal("1.00"), Decimal("0.000556")),  # 2 s at ¥1800/h, a new line (lines by unit price)
        ("rent", Decimal("7.00"), Decimal("5.00"), Decimal("0.001389"))]  # 5 s = 0.001389 GPU-h at ¥3600/h
    # t02: its hour (01:00 local) is all at ¥0.5/s: 30 × 0.5 = 15.00; VAT 0.90; total 15.90
    assert (t02.old_total, t02.new_total) == (Decimal("31.80"), fen(Fraction(15) * (1 + VAT)))
    # one line per invoice line, old → new: the price changed, the line is the same rent line
    assert [(ln.old_amount, ln.new_amount) for ln in t02.lines] == [(Decimal("30.00"), Decimal("15.00"))]
    assert [(ln.old.unit_price, ln.new.unit_price) for ln in t02.lines] == [(Decimal("3600.000000"),
                                                                             Decimal("1800.000000"))]
    only = rerate_preview(db, rules, PERIOD, tenant="t02")
    assert [t.tenant for t in only.tenants] == ["t02"] and only.tenants[0].new_total == t02.new_total


def test_under_the_rules_that_priced_it_nothing_changes_late_adjustments_included(db):
    seed_tenants(db, {"t01": 7, "t02": 30})
    run_period(db, RULES, PERIOD, now=NOW)
    seed_tenants(db, {"t01": 12})  # late March usage, charged on April's invoice as an adjustment
    seed_tenants(db, {"t01": 3}, period="2026-04")
    run_period(db, RULES, "2026-04", now=datetime(2026, 5, 10, tzinfo=UTC))
    for period in (PERIOD, "2026-04"):
        report = rerate_preview(db, RULES, period)
        assert report.tenants and all(t.difference == 0 for t in report.tenants), period
    # April, line by line: its adjustment for March (+5.00) is recomputed as if April had not
    # charged it, so it comes out the same
    april = by_tenant(rerate_preview(db, RULES, "2026-04"))["t01"]
    assert [(ln.kind, ln.old_amount, ln.new_amount) for ln in april.lines] == [
        ("rent", Decimal("3.00"), Decimal("3.00")), ("adjustment", Decimal("5.00"), Decimal("5.00"))]
    # March's preview is what its replacement would be: 12.00 now, less the 5.00 April charged
    march = by_tenant(rerate_preview(db, RULES, PERIOD))["t01"]
    assert march.old_total == march.new_total == Decimal("7.42")
    assert [(ln.kind, ln.old_amount, ln.new_amount) for ln in march.lines] == [
        ("rent", Decimal("7.00"), Decimal("12.00")), ("adjustment", None, Decimal("-5.00"))]


def test_a_tenant_without_an_invoice_shows_what_its_first_would_be(db, tmp_path):
    seed_tenants(db, {"t01": 7})
    report = rerate_preview(db, corrected_rules(tmp_path, "2026-03-01"), PERIOD)
    (t01,) = report.tenants
    assert (t01.invoice, t01.status, t01.old_total) == ("", "none", Decimal("0.00"))
    assert t01.new_total == fen(Fraction(7, 2) * (1 + VAT)) == Decimal("3.71")  # 7 s × ¥0.5 = 3.50, VAT 0.21


def test_the_command_refuses_without_dry_run_and_prints_json(tmp_path):
    import json
    import os
    import subprocess
    import sys

    from tests.chdb_template import migrated_dsn
    from warehouse.connection import open_database

    dsn = migrated_dsn(tmp_path / "ch")
    with open_database(dsn) as database:
        seed_tenants(database, {"t01": 7})
        run_period(database, RULES, PERIOD, now=NOW)
    env = {**os.environ, "GPUBILL_CLICKHOUSE": dsn, "GPUBILL_RULES": str(Path(__file__).parents[1] / "e2e" / "rules"),
           "NO_COLOR": "1", "GPUBILL_HOME": str(tmp_path / "var")}
    refused = subprocess.run([sys.executable, "-m", "gpubill.cli", "rerate", "--period", PERIOD], env=env,
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1 and "say --dry-run" in refused.stderr
    # no broker here: --offline plans with the stored corrections, and says so (issue 36)
    done = subprocess.run([sys.executable, "-m", "gpubill.cli", "rerate", "--period", PERIOD, "--dry-run", "--json",
                           "--offline"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr == (f"rerate {PERIOD}: --offline: the log of corrections was not read; the 0 corrections stored "
                           "are applied, any on gpu.corrections.v1 and not stored yet are left out\n")
    applied = subprocess.run([sys.executable, "-m", "gpubill.cli", "rerate", "--period", PERIOD, "--apply", "--offline"],
                             env=env, capture_output=True, text=True, timeout=120)
    assert applied.returncode == 1 and applied.stderr.startswith("error: --offline is for --dry-run"), applied.stderr
    answer = json.loads(done.stdout)
    assert answer["period"] == PERIOD and answer["rules_revision"] == RULES.revision
    assert [(t["tenant"], t["invoice"], t["old_total"], t["new_total"], t["difference"]) for t in answer["tenants"]] == [
        ("t01", "GB-2026-000001", "7.42", "7.42", "0.00")]
