"""Month-to-date figures (billing/current_usage.py) and hourly usage rows, on the embedded ClickHouse.

The fixture, with the e2e rules (tests/e2e/rules: A800-80G hourly ¥3600/h = ¥1 per second,
RTX 4090 monthly ¥2,678,400 over March's 2,678,400 s = ¥1 per second, Gui'an ¥330/kWh at
PUE 1.12, VAT 6 %; acme has a ¥150 onboarding credit spendable in March, beta a 10 %
discount on its monthly RTX 4090):

- acme, card GPU-a (A800-80G, hourly): 100 s from 2026-03-10T00:00:00Z (08:00 in Shanghai)
  and 50 s from 01:00:00Z, each second drawing 500 W (500,000 mJ), all allocated to acme;
- beta, card GPU-b (RTX 4090, monthly, 10 % off): 200 s from 00:00:00Z, no power readings.

Every expected figure below is worked out by hand (or with Fraction) in a comment.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from decimal import Decimal as D
from fractions import Fraction
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from tests.unit.cli_run import UNLOGGED_CLI

import usage.rollup as rollup
from billing.current_usage import CurrentUsage, DailyUsage, current_usage, daily_usage
from billing.invoicing import run_period
from billing_rules import load_rules
from reports.usage_report import hour_name, usage_report
from schemas.tables import RATED_SECONDS
from tests.chdb_template import migrated_dsn
from warehouse import writes
from warehouse.connection import open_database
from warehouse.writes import stamp_hours

RULES_DIR = Path(__file__).parents[1] / "e2e" / "rules"
RULES = load_rules(RULES_DIR)
PERIOD = "2026-03"
T0 = 1_773_100_800  # 2026-03-10T00:00:00Z
NOW = datetime(2026, 3, 12, 6, 0, tzinfo=timezone.utc)
MJ = 500_000  # 500 W for one second


def _row(stream: str, card: str, at: int, tenant: str, *, model: str = "", plan: str = "", price: str = "0",
         per_s: int = 0, pct: str = "0", mj: int = 0) -> list:
    values = {
        "stream": stream, "gpu_uuid": card, "second": datetime.fromtimestamp(at, timezone.utc), "period": PERIOD,
        "tenant": tenant, "instance": f"{tenant}-i1", "gpu_model": model, "site": "gz-guian", "node": "n1",
        "plan": plan, "rent_price": D(price), "rent_per_s": per_s, "discount_pct": D(pct), "util_pct": D("50"),
        "energy_mj": mj, "band": "flat" if stream == "energy" else "", "tariff_per_kwh": D("330") if mj else D(0),
        "pue": D("1.12") if mj else D(0), "version": 1, "src_partition": 0, "src_offset": at,
        "measured": 0, "rated_at": datetime(2026, 3, 10, 2, tzinfo=timezone.utc),
    }
    return [values[c] for c in RATED_SECONDS]


def _fixture_rows() -> list[list]:
    rows = []
    for at in [*range(T0, T0 + 100), *range(T0 + 3600, T0 + 3650)]:
        rows.append(_row("rent", "GPU-a", at, "acme", model="A800-80G", plan="hourly", price="3600", per_s=3600))
        rows.append(_row("energy", "GPU-a", at, "acme", model="A800-80G", mj=MJ))  # the usage reading's model
    for at in range(T0, T0 + 200):
        rows.append(_row("rent", "GPU-b", at, "beta", model="RTX4090", plan="monthly", price="2678400",
                         per_s=2_678_400, pct="10"))
    return rows


@pytest.fixture()
def db(tmp_path, monkeypatch):
    monkeypatch.setattr(writes, "MARGIN_S", 0)
    with open_database(migrated_dsn(tmp_path / 'db')) as database:
        database.insert("rated_seconds", _fixture_rows(), RATED_SECONDS)
        stamp_hours(database, {(PERIOD, T0), (PERIOD, T0 + 3600)})
        yield database


def _written(db) -> tuple:
    return tuple(db.query(f"SELECT count() FROM {t}")[0][0] for t in ("invoices", "invoice_lines", "billing_runs"))


# acme: rent 150 s × ¥1 = ¥150.00; energy 150 s × 500,000 mJ = 75,000,000 mJ
ACME_KWH = Fraction(75_000_000, 3_600_000_000) * Fraction("1.12")  # 0.0233333… kWh billed
ACME_ELECTRICITY = ACME_KWH * 330  # = ¥7.70 exactly
assert ACME_ELECTRICITY == Fraction("7.7")
# credits: ¥150 onboarding of ¥157.70 owed → net ¥7.70; VAT 6 % of 7.70 = 0.462 → ¥0.46; total ¥8.16
ACME = dict(tenant="acme", period=PERIOD, gpu_hours=D("0.041667"),  # 150/3600 = 0.0416666… → six decimals
            kwh=D("0.023333"), rent=D("150.00"), electricity=D("7.70"), credits=D("150.00"), vat=D("0.46"),
            estimated_total=D("8.16"))
# beta: 200 s × ¥1 = ¥200.00, discount 10 % = −¥20.00 → net ¥180.00; VAT ¥10.80; total ¥190.80; no kWh, no credit
BETA = dict(tenant="beta", period=PERIOD, gpu_hours=D("0.055556"), kwh=D(0), rent=D("180.00"), electricity=D(0),
            credits=D(0), vat=D("10.80"), estimated_total=D("190.80"))


def test_current_usage_is_the_invoice_it_would_be_and_writes_nothing(db):
    before = _written(db)
    acme = current_usage(db, RULES, "acme", now=NOW)
    assert acme == CurrentUsage(**ACME, newest_data_at=datetime.fromtimestamp(T0 + 3649, timezone.utc),
                                invoiced=False, invoice_number=None)
    assert acme.rent + acme.electricity - acme.credits + acme.vat == acme.estimated_total
    beta = current_usage(db, RULES, "beta", now=NOW)
    assert beta == CurrentUsage(**BETA, newest_data_at=datetime.fromtimestamp(T0 + 199, timezone.utc),
                                invoiced=False, invoice_number=None)
    assert _written(db) == before == (0, 0, 0)


def test_current_usage_of_a_tenant_without_data_and_of_another_period(db):
    nobody = current_usage(db, RULES, "gamma", now=NOW)
    assert (nobody.gpu_hours, nobody.estimated_total, nobody.newest_data_at, nobody.invoiced) == (0, 0, None, False)
    # 2026-03-31T16:30:00Z is already April in Shanghai: nothing of March's usage
    april = current_usage(db, RULES, "acme", now=datetime(2026, 3, 31, 16, 30, tzinfo=timezone.utc))
    assert (april.period, april.rent, april.newest_data_at) == ("2026-04", 0, None)


def test_current_usage_reads_the_same_through_rollups(db):
    live = current_usage(db, RULES, "acme", now=NOW)
    rollup.roll_up(db, RULES, period=PERIOD)
    assert db.query("SELECT count() FROM rollup_runs")[0][0] == 2  # both hours published
    assert current_usage(db, RULES, "acme", now=NOW) == live


def test_once_invoiced_the_figures_are_the_invoice(db):
    estimate = current_usage(db, RULES, "acme", now=NOW)
    run_period(db, RULES, PERIOD, now=datetime(2026, 4, 4, tzinfo=timezone.utc))
    invoiced = current_usage(db, RULES, "acme", now=NOW)
    assert invoiced.invoiced and invoiced.invoice_number == "GB-2026-000001"  # acme is first in order
    assert invoiced.estimated_total == estimate.estimated_total == D("8.16")
    assert (invoiced.rent, invoiced.electricity, invoiced.credits, invoiced.vat) == (
        estimate.rent, estimate.electricity, estimate.credits, estimate.vat)
    assert current_usage(db, RULES, "beta", now=NOW).invoice_number == "GB-2026-000002"


def test_daily_usage_has_every_day_of_the_month(db):
    days = daily_usage(db, RULES, "acme", PERIOD)
    assert [d.day for d in days] == [f"2026-03-{n:02d}" for n in range(1, 32)]
    # all of acme's seconds fall on 2026-03-10 in Shanghai (08:00–09:01)
    assert days[9] == DailyUsage(day="2026-03-10", gpu_hours=D("0.041667"), rent=D("150.00"),
                                 electricity=D("7.70"), spend=D("157.70"))
    assert all(d.spend == 0 and d.gpu_hours == 0 for d in days if d.day != "2026-03-10")
    assert daily_usage(db, RULES, "beta", PERIOD)[9].spend == D("180.00")  # 200 s × ¥1 − 10 %
    with pytest.raises(Exception, match="2026-13"):
        daily_usage(db, RULES, "acme", "2026-13")


def test_hourly_usage_rows_name_their_hour_in_the_billing_time_zone(db):
    report = usage_report(db, RULES, "acme", PERIOD, granularity="hour", now=NOW)
    assert (report.granularity, report.time_zone) == ("hour", "Asia/Shanghai")
    # hour 1: 100 s → ¥100.00 rent; 100 × 500,000 mJ × 1.12 × ¥330 / 3.6e9 = ¥5.1333… → ¥5.13
    # hour 2:  50 s → ¥50.00 rent;  50 × 500,000 mJ × 1.12 × ¥330 / 3.6e9 = ¥2.5666… → ¥2.57
    assert Fraction(100 * MJ, 3_600_000_000) * Fraction("1.12") * 330 == Fraction(77, 15)  # 5.1333…
    assert [(r.hour, r.day, r.rent, r.electricity, r.gpu_hours) for r in report.rows] == [
        ("2026-03-10T08:00:00+08:00", "2026-03-10", D("100.00"), D("5.13"), D("0.027778")),
        ("2026-03-10T09:00:00+08:00", "2026-03-10", D("50.00"), D("2.57"), D("0.013889")),
    ]
    daily = usage_report(db, RULES, "acme", PERIOD, now=NOW)
    assert [(r.hour, r.rent, r.electricity) for r in daily.rows] == [("", D("150.00"), D("7.70"))]
    assert usage_report(db, RULES, "beta", PERIOD, granularity="hour", now=NOW).rows[0].gpu_uuid == "GPU-b"
    with pytest.raises(ValueError, match="unknown granularity 'minute'"):
        usage_report(db, RULES, "acme", PERIOD, granularity="minute")


def test_hour_names_keep_the_zone_offset():
    assert hour_name(T0, ZoneInfo("Asia/Shanghai")) == "2026-03-10T08:00:00+08:00"
    assert hour_name(T0, ZoneInfo("Asia/Kolkata")) == "2026-03-10T05:30:00+05:30"  # a UTC hour, named by its start
    assert hour_name(T0, timezone.utc) == "2026-03-10T00:00:00+00:00"


# --- the command line: --lang and --granularity ---------------------------------------------


@pytest.fixture(scope="module")
def db_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "ch"
    with open_database(f"chdb://{path}") as database:
        database.insert("rated_seconds", _fixture_rows(), RATED_SECONDS)
        stamp_hours(database, {(PERIOD, T0), (PERIOD, T0 + 3600)})
    return path


def gpubill(db_path: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GPUBILL_CLICKHOUSE": f"chdb://{db_path}", "GPUBILL_RULES": str(RULES_DIR),
           "GPUBILL_ROLLUP_MARGIN_S": "0", "NO_COLOR": "1", "COLUMNS": "2000"}
    return subprocess.run([sys.executable, UNLOGGED_CLI, *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def test_cli_usage_report_per_hour_and_in_chinese(db_path, tmp_path):
    out = tmp_path / "acme.csv"
    done = gpubill(db_path, tmp_path, "report", "usage", "--tenant", "acme", "--period", PERIOD, "--format", "csv",
                   "--granularity", "hour", "--lang", "zh-CN", "--out", str(out))
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert [(r["hour"], r["rent"], r["electricity"]) for r in rows] == [
        ("2026-03-10T08:00:00+08:00", "100.00", "5.13"), ("2026-03-10T09:00:00+08:00", "50.00", "2.57")]
    pdf = tmp_path / "acme.pdf"
    done = gpubill(db_path, tmp_path, "report", "usage", "--tenant", "acme", "--period", PERIOD, "--format", "pdf",
                   "--lang", "zh-CN", "--out", str(pdf))
    assert done.returncode == 0, done.stderr
    assert b"/FontFile" in pdf.read_bytes() and b"/Lang (zh-CN)" in pdf.read_bytes()


@pytest.mark.parametrize("args", [
    ("report", "usage", "--tenant", "acme", "--period", PERIOD, "--out", "x.csv", "--lang", "zh"),
    ("report", "usage", "--tenant", "acme", "--period", PERIOD, "--out", "x.csv", "--granularity", "minute"),
    ("invoice", "show", "--tenant", "acme", "--period", PERIOD, "--lang", "fr"),
    ("invoice", "run", "--period", PERIOD, "--lang", "de"),
])
def test_cli_refuses_a_bad_language_or_granularity_before_reading(db_path, tmp_path, args):
    done = gpubill(tmp_path / "no-such-db", tmp_path, *args)  # refused before the database is opened
    assert done.returncode == 1 and "Traceback" not in done.stderr
    option = "--granularity" if "--granularity" in args else "--lang"
    assert f"{option}: " in done.stderr and "is not one of" in done.stderr
    assert not (tmp_path / "x.csv").exists()


def test_cli_invoices_in_chinese(db_path, tmp_path):
    out = tmp_path / "invoices"
    done = gpubill(db_path, tmp_path, "invoice", "run", "--period", PERIOD, "--out", str(out), "--lang", "zh-CN",
                   "--offline")  # no broker here
    assert done.returncode == 0, done.stderr
    pdfs = sorted(out.glob("*.pdf"))
    assert len(pdfs) == 2 and all(b"/Lang (zh-CN)" in p.read_bytes() for p in pdfs)
    # issue 36: the language is in a PDF's name, so the English run into the same folder keeps both
    assert all(p.name.endswith(f"_acme_{PERIOD}.zh-CN.pdf") or p.name.endswith(f"_beta_{PERIOD}.zh-CN.pdf") for p in pdfs)
    shown = gpubill(db_path, tmp_path, "invoice", "show", "--tenant", "acme", "--period", PERIOD, "--format", "json",
                    "--lang", "zh-CN")
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert (doc["total"], doc["tax"]) == ("8.16", "0.46")  # as estimated above
    english = gpubill(db_path, tmp_path, "invoice", "show", "--tenant", "acme", "--period", PERIOD, "--format", "json")
    assert english.stdout == shown.stdout  # JSON is the same in every language
    written = next(p for p in out.glob("*acme*.json"))
    assert json.loads(written.read_bytes()) == doc
