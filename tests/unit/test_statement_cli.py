"""`gpubill receivables` and `gpubill statement` (issue 38) as a user runs them: each command in a process
of its own (tests/unit/unlogged_cli.py) on an embedded ClickHouse seeded through billing/payments.py.

The seed (rules: tests/e2e/rules, VAT 6 %, payment terms 15 days, a ¥10 trial credit for each
registered tenant, billing time zone Asia/Shanghai; tests/unit/test_invoice_lock_runs.py's rows:
one A800 card at ¥1/s). t01, t02, t03 are registered on 2026-03-01:

    GB-2026-000001  t01 March  100 s: 100.00 − 10.00 trial = 90.00, VAT 5.40   → 95.40
    GB-2026-000002  t02 March  200 s: 200.00 − 10.00 = 190.00, VAT 11.40        → 201.40
    GB-2026-000003  t03 March   30 s:  30.00 − 10.00 =  20.00, VAT 1.20         → 21.20
        issued 2026-04-10 (run at 04-10T00:00Z = 08:00 in Shanghai), due 04-25
    GB-2026-000004  t01 April   50 s:  50.00, VAT 3.00 (the trial is spent)     → 53.00
        issued 2026-05-10, due 05-25

then, recorded after both runs (each with its own received date):

    pay-1  t01  ¥50.00 received 04-20  → GB-…01 (the oldest due)                       effective 04-20
    pay-2  t01 ¥100.00 received 05-05  → GB-…01 45.40 (effective 05-05), GB-…04 53.00
           (effective 05-10: the invoice's issue, after the receipt), 1.60 held as credit
    pay-3  t02 ¥201.40 received 05-30  → GB-…02, 35 days past its due date
    CN-2026-000001  goodwill on GB-…04 (paid), line 1 ¥10.00 + VAT 0.60 = 10.60, on 06-05,
           refunded (refund-1): nothing is outstanding on GB-…04 to take it
    GB-…03 (t03 never pays) written off on 08-01: 21.20
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from datetime import UTC, date, datetime
from decimal import Decimal as D
from pathlib import Path

import pytest

from billing.accounts import receivables
from billing.credit_notes import create_credit_note
from billing.invoicing import run_period
from billing.payments import record_payment, write_off
from billing.tenants import add_tenant
from tests.chdb_template import migrated_dsn
from tests.pdf_reading import pdf_text
from tests.unit.cli_run import UNLOGGED_CLI
from tests.unit.test_invoice_lock_runs import RULES, seed_tenants
from tests.unit.test_tenants import assert_one_printable_line
from warehouse import writes
from warehouse.connection import open_database

RULES_DIR = Path(__file__).parents[1] / "e2e" / "rules"
LATER = datetime(2026, 8, 1, 2, tzinfo=UTC)  # when the payments are recorded: after every date they name


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    """The database of the module docstring, closed (each command opens it); its DSN."""
    directory = tmp_path_factory.mktemp("statement")
    dsn = migrated_dsn(directory / "ch")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(writes, "MARGIN_S", 0)
        with open_database(dsn) as db:
            for tenant in ("t01", "t02", "t03"):
                add_tenant(db, tenant, tenant.upper(), now=datetime(2026, 3, 1, tzinfo=UTC))
            seed_tenants(db, {"t01": 100, "t02": 200, "t03": 30})
            run_period(db, RULES, "2026-03", now=datetime(2026, 4, 10, tzinfo=UTC))
            seed_tenants(db, {"t01": 50}, period="2026-04")
            run_period(db, RULES, "2026-04", now=datetime(2026, 5, 10, tzinfo=UTC))
            totals = dict(db.query("SELECT number, total FROM invoices FINAL WHERE status = 'issued'"))
            assert totals == {"GB-2026-000001": D("95.40"), "GB-2026-000002": D("201.40"),
                              "GB-2026-000003": D("21.20"), "GB-2026-000004": D("53.00")}
            record_payment(db, RULES, "t01", "50.00", "pay-1", "2026-04-20", now=LATER)
            record_payment(db, RULES, "t01", "100.00", "pay-2", "2026-05-05", now=LATER)
            record_payment(db, RULES, "t02", "201.40", "pay-3", "2026-05-30", now=LATER)
            note = create_credit_note(db, RULES, "GB-2026-000004", "goodwill", {1: D("10.00")}, refund="refund-1",
                                      now=datetime(2026, 6, 5, 2, tzinfo=UTC))
            assert (note.number, note.total) == ("CN-2026-000001", D("10.60"))
            assert write_off(db, RULES, "GB-2026-000003", "gone", now=LATER) == D("21.20")
            allocations = {(source, invoice): (amount, on) for source, invoice, amount, on in db.query(
                "SELECT source, invoice, amount, effective_on FROM allocations FINAL")}
            assert allocations == {  # the writer's rule: effective from the later of receipt and issue
                ("pay-1", "GB-2026-000001"): (D("50.00"), date(2026, 4, 20)),
                ("pay-2", "GB-2026-000001"): (D("45.40"), date(2026, 5, 5)),
                ("pay-2", "GB-2026-000004"): (D("53.00"), date(2026, 5, 10)),
                ("pay-3", "GB-2026-000002"): (D("201.40"), date(2026, 5, 30))}
    return dsn, directory


def gpubill(seeded, *args: str) -> subprocess.CompletedProcess:
    dsn, directory = seeded
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GPUBILL_")}, "GPUBILL_CLICKHOUSE": dsn,
           "GPUBILL_RULES": str(RULES_DIR), "GPUBILL_HOME": str(directory / "var"), "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run([sys.executable, UNLOGGED_CLI, *args], env=env, capture_output=True, text=True,
                          timeout=120, cwd=directory)


def ok(seeded, *args: str) -> str:
    done = gpubill(seeded, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def aging_json(seeded, as_of: str) -> dict:
    return json.loads(ok(seeded, "receivables", "--as-of", as_of, "--format", "json"))


def figures(row: dict) -> tuple[str, ...]:
    return tuple(row[k] for k in ("current", "d1_30", "d31_60", "d61_90", "d90_plus", "outstanding", "unapplied"))


# ------------------------------------------------------------------------------------ receivables


def test_before_any_payment_everything_is_not_yet_due(seeded):
    answer = aging_json(seeded, "2026-04-19")
    assert answer["as_of"] == "2026-04-19" and answer["currency"] == "CNY"
    assert {r["tenant"]: figures(r) for r in answer["tenants"]} == {
        "t01": ("95.40", "0.00", "0.00", "0.00", "0.00", "95.40", "0.00"),
        "t02": ("201.40", "0.00", "0.00", "0.00", "0.00", "201.40", "0.00"),
        "t03": ("21.20", "0.00", "0.00", "0.00", "0.00", "21.20", "0.00")}
    # 95.40 + 201.40 + 21.20 = 318.00
    assert figures(answer["total"]) == ("318.00", "0.00", "0.00", "0.00", "0.00", "318.00", "0.00")
    assert "tenant" not in answer["total"]


def test_as_of_a_receipt_before_its_invoice_the_rest_is_credit_held(seeded):
    # 05-04: pay-1 only; GB-…01 95.40 − 50.00 = 45.40, 9 days past 04-25; pay-2 not received yet
    before = {r["tenant"]: figures(r) for r in aging_json(seeded, "2026-05-04")["tenants"]}
    assert before["t01"] == ("0.00", "45.40", "0.00", "0.00", "0.00", "45.40", "0.00")
    # 05-05: pay-2 received: 45.40 on GB-…01; GB-…04 is issued only on 05-10, so 100 − 45.40 = 54.60 is held
    on = {r["tenant"]: figures(r) for r in aging_json(seeded, "2026-05-05")["tenants"]}
    assert on["t01"] == ("0.00", "0.00", "0.00", "0.00", "0.00", "0.00", "54.60")
    # 05-25, GB-…04's due date: paid since 05-10, 1.60 held (150.00 − 95.40 − 53.00); t02 and t03 at day 30
    due = {r["tenant"]: figures(r) for r in aging_json(seeded, "2026-05-25")["tenants"]}
    assert due == {"t01": ("0.00", "0.00", "0.00", "0.00", "0.00", "0.00", "1.60"),
                   "t02": ("0.00", "201.40", "0.00", "0.00", "0.00", "201.40", "0.00"),
                   "t03": ("0.00", "21.20", "0.00", "0.00", "0.00", "21.20", "0.00")}


def test_day_91_then_the_write_off(seeded):
    # 07-25: t03's 21.20 is 91 days past 04-25 (5 + 31 + 30 + 25); t02 paid on 05-30; the goodwill
    # note (10.60, 06-05) was refunded the same day: t01 still holds 1.60
    late = aging_json(seeded, "2026-07-25")
    assert {r["tenant"]: figures(r) for r in late["tenants"]} == {
        "t01": ("0.00", "0.00", "0.00", "0.00", "0.00", "0.00", "1.60"),
        "t03": ("0.00", "0.00", "0.00", "0.00", "21.20", "21.20", "0.00")}
    after = aging_json(seeded, "2026-08-01")  # written off on 08-01
    assert [r["tenant"] for r in after["tenants"]] == ["t01"]
    assert figures(after["total"]) == ("0.00", "0.00", "0.00", "0.00", "0.00", "0.00", "1.60")


def test_the_table_and_the_csv_say_the_same(seeded):
    table = ok(seeded, "receivables", "--as-of", "2026-05-25")
    lines = [line.split("│") for line in table.splitlines() if "│" in line]
    cells = {cols[1].strip(): [c.strip() for c in cols[2:-1]] for cols in lines}
    assert cells["t02"] == ["0.00", "201.40", "0.00", "0.00", "0.00", "201.40", "0.00"]
    assert cells["total"] == ["0.00", "222.60", "0.00", "0.00", "0.00", "222.60", "1.60"]  # 201.40 + 21.20
    rows = list(csv.DictReader(io.StringIO(ok(seeded, "receivables", "--as-of", "2026-05-25", "--format", "csv"))))
    assert [r["tenant"] for r in rows] == ["t01", "t02", "t03", ""]  # the total last, tenant empty
    assert (rows[-1]["d1_30"], rows[-1]["outstanding"], rows[-1]["unapplied"]) == ("222.60", "222.60", "1.60")


def test_the_command_prints_what_billing_accounts_receivables_answers(seeded):
    with open_database(seeded[0]) as db:
        rows, total = receivables(db, RULES, date(2026, 5, 25))
    answer = aging_json(seeded, "2026-05-25")
    assert answer["tenants"] == [r.as_dict() for r in rows]
    assert total.d1_30 == D("222.60") and total.unapplied == D("1.60")


def test_as_of_defaults_to_today_and_a_later_day_is_said_to_be_later(seeded):
    today = datetime.now(UTC).astimezone(RULES.billing_tz).date()  # the billing time zone's, not UTC's
    if today >= date(2026, 8, 1):  # everything recorded is on or before 08-01: t01 holds 1.60 from then on
        assert figures(aging_json(seeded, str(today))["total"])[-1] == "1.60"
    answer = json.loads(ok(seeded, "receivables", "--format", "json"))
    assert answer["as_of"] in (str(today), str(datetime.now(UTC).astimezone(RULES.billing_tz).date()))  # midnight
    done = gpubill(seeded, "receivables", "--as-of", "2099-01-01", "--format", "json")
    assert done.returncode == 0 and json.loads(done.stdout)["as_of"] == "2099-01-01"
    assert "--as-of 2099-01-01 is after today" in done.stderr and "not counted yet" in done.stderr


@pytest.mark.parametrize("args, fragment", [
    (("--as-of", "2026-02-30"), "--as-of: 2026-02-30 is not a date of the calendar"),
    (("--as-of", "30/05/2026"), "is not a date YYYY-MM-DD"),
    (("--as-of", "２０２６-05-01"), "is not a date YYYY-MM-DD"),
    (("--format", "xml"), "--format: 'xml' is not one of table, csv, json"),
])
def test_bad_receivables_options_are_one_line(seeded, args, fragment):
    done = gpubill(seeded, "receivables", *args)
    assert done.returncode == 1 and done.stdout == ""
    assert fragment in done.stderr
    assert_one_printable_line(done.stderr.strip())


# ------------------------------------------------------------------------------------ statement


def test_the_statement_of_april_to_june(seeded):
    """t01 from 04-01 to 06-30, nothing before (opening 0.00):

        04-10 invoice GB-…01 +95.40 → 95.40;  04-20 pay-1 −50.00 → 45.40;  05-05 pay-2 −100.00 → −54.60
        05-10 invoice GB-…04 +53.00 → −1.60;  06-05 CN-…01 −10.60 → −12.20;  06-05 refund-1 +10.60 → −1.60
    closing −1.60 = outstanding 0.00 − 1.60 held (the aging as of 06-30)."""
    d = json.loads(ok(seeded, "statement", "--tenant", "t01", "--from", "2026-04-01", "--to", "2026-06-30"))
    assert (d["tenant"], d["from"], d["to"], d["currency"]) == ("t01", "2026-04-01", "2026-06-30", "CNY")
    assert [(e["date"], e["kind"], e["document"], e["amount"], e["balance"]) for e in d["entries"]] == [
        ("2026-04-10", "invoice", "GB-2026-000001", "95.40", "95.40"),
        ("2026-04-20", "payment", "pay-1", "-50.00", "45.40"),
        ("2026-05-05", "payment", "pay-2", "-100.00", "-54.60"),
        ("2026-05-10", "invoice", "GB-2026-000004", "53.00", "-1.60"),
        ("2026-06-05", "credit_note", "CN-2026-000001", "-10.60", "-12.20"),
        ("2026-06-05", "refund", "refund-1", "10.60", "-1.60"),
    ]
    assert (d["opening_balance"], d["closing_balance"]) == ("0.00", "-1.60")
    assert (d["charges"], d["credits"]) == ("159.00", "-160.60")  # 95.40 + 53.00 + 10.60; 50 + 100 + 10.60
    assert (d["aging"]["outstanding"], d["aging"]["unapplied"]) == ("0.00", "1.60")
    assert d["buyer"]["tenant"] == "t01" and d["buyer"]["display_name"] == "T01"
    assert d["seller"]["legal_name"] == "Guizhou Qiancloud Computing Co., Ltd."


def test_a_statement_opens_with_what_was_owed_before_it(seeded):
    # May: before it 95.40 − 50.00 = 45.40; pay-2 −100.00 → −54.60; GB-…04 +53.00 → −1.60
    rows = list(csv.DictReader(io.StringIO(ok(seeded, "statement", "--tenant", "t01", "--from", "2026-05-01",
                                               "--to", "2026-05-31", "--format", "csv"))))
    assert [(r["date"], r["kind"], r["document"], r["amount"], r["balance"]) for r in rows] == [
        ("2026-05-01", "opening_balance", "", "", "45.40"),
        ("2026-05-05", "payment", "pay-2", "-100.00", "-54.60"),
        ("2026-05-10", "invoice", "GB-2026-000004", "53.00", "-1.60"),
        ("2026-05-31", "closing_balance", "", "", "-1.60"),
    ]


def test_a_written_off_tenants_statement(seeded):
    d = json.loads(ok(seeded, "statement", "--tenant", "t03", "--from", "2026-07-01", "--to", "2026-08-31"))
    assert d["opening_balance"] == "21.20"  # GB-…03, never paid
    assert [(e["date"], e["kind"], e["amount"], e["balance"]) for e in d["entries"]] == [
        ("2026-08-01", "write_off", "-21.20", "0.00")]
    assert d["closing_balance"] == "0.00" and d["aging"]["outstanding"] == "0.00"


@pytest.mark.parametrize("lang, words", [
    ("en", ("STATEMENT", "Opening balance", "Closing balance", "payment pay-2 (bank)", "GB-2026-000004", "-54.60",
            "Not yet due", "Guizhou Qiancloud Computing Co., Ltd.")),
    ("zh-CN", ("对账单", "期初余额", "期末余额", "收款 pay-2", "账单 GB-2026-000004", "-54.60", "未到期",
               "贵州黔云算力科技有限公司", "负壹元陆角")),
])
def test_the_statement_as_a_pdf_in_both_languages(seeded, tmp_path, lang, words):
    out = tmp_path / f"statement-{lang}.pdf"
    args = ("statement", "--tenant", "t01", "--from", "2026-04-01", "--to", "2026-06-30", "--format", "pdf",
            "--lang", lang, "--out", str(out))
    done = gpubill(seeded, *args)
    assert done.returncode == 0, done.stderr
    data = out.read_bytes()
    text = pdf_text(data)
    missing = [w for w in words if w not in text]
    assert not missing, text
    assert b"/CreationDate (D:20260630000000Z)" in data  # its last day, never the clock
    again = tmp_path / "again.pdf"
    assert gpubill(seeded, *args[:-1], str(again)).returncode == 0
    assert again.read_bytes() == data  # the same statement, the same bytes


@pytest.mark.parametrize("args, fragment", [
    (("--tenant", "t01", "--from", "2026-06-01", "--to", "2026-05-31"), "--from 2026-06-01 is after --to 2026-05-31"),
    (("--tenant", "nobody", "--from", "2026-04-01", "--to", "2026-04-30"), "no tenant 'nobody'"),
    # ascii() of the id, its backslash doubled by terminal_text: never an escape the terminal runs
    (("--tenant", "t\x1b[31m01", "--from", "2026-04-01", "--to", "2026-04-30"), "no tenant 't\\\\x1b[31m01'"),
    (("--tenant", "t01", "--from", "2026-04-31", "--to", "2026-05-31"), "--from: 2026-04-31 is not a date"),
    (("--tenant", "t01", "--from", "2026-04-01"), "Missing option '--to'"),
    (("--tenant", "t01", "--from", "2026-04-01", "--to", "2026-04-30", "--format", "pdf"), "give --out FILE"),
    (("--tenant", "t01", "--from", "2026-04-01", "--to", "2026-04-30", "--lang", "fr"), "--lang: 'fr' is not one"),
])
def test_bad_statement_options_are_one_line(seeded, args, fragment):
    done = gpubill(seeded, "statement", *args)
    assert done.returncode == 1 and done.stdout == ""
    assert fragment in done.stderr
    assert_one_printable_line(done.stderr.strip())


# ------------------------------------------------------------------------ the renderings, pure


def test_a_bare_statement_renders_and_hostile_text_stays_text():
    """What the tenant API calls: `render_statement` of billing_rules' Statement, nothing around it.
    A tenant id as readings may carry it is a cell, never a formula (receivables' CSV too)."""
    from billing_rules.accounts import Aging, Statement, StatementEntry
    from gpubill.cli.receivables import receivables_csv
    from reports.render import render_statement

    entry = StatementEntry(date(2026, 4, 10), "invoice", "GB-2026-000001", "=cmd|' /C calc'!A0", D("95.40"),
                           D("95.40"))
    bare = Statement("@evil", date(2026, 4, 1), date(2026, 4, 30), D("0.00"), (entry,), D("95.40"))
    d = json.loads(render_statement(bare, "json"))
    assert (d["tenant"], d["aging"], d["seller"], d["buyer"], d["closing_balance"]) == (
        "@evil", None, None, None, "95.40")
    rows = list(csv.reader(io.StringIO(render_statement(bare, "csv", lang="zh-CN").decode())))
    assert rows[2] == ["2026-04-10", "invoice", "GB-2026-000001", "'=cmd|' /C calc'!A0", "95.40", "95.40"]
    assert render_statement(bare, "pdf").startswith(b"%PDF")
    with pytest.raises(ValueError, match="unknown format 'xml' for a statement"):
        render_statement(bare, "xml")
    with pytest.raises(ValueError, match="unknown language"):
        render_statement(bare, "json", lang="fr")
    row = Aging("=HYPERLINK(\"http://x\")", d1_30=D("5.00"))
    lines = receivables_csv([row], Aging("", d1_30=D("5.00"))).splitlines()
    assert lines[1].startswith("\"'=HYPERLINK(\"\"http://x\"\")\",0.00,5.00,")
    assert lines[2] == ",0.00,5.00,0.00,0.00,0.00,5.00,0.00"
