"""Payments and receivables end to end (issue 38) on a real broker and chDB: three invoices over two
months for two tenants, a partial payment, an overpayment, a bank import with one unmatched line, a
goodwill credit note on a paid invoice with a refund, a write-off — then each invoice's state, the
aging as of five dates, a statement; then the database deleted and `gpubill rebuild --yes` gives
the same answers.

The invoices are tests/e2e/test_pipeline_e2e.py's, figures worked out there by hand:

    GB-2026-000001  acme  2026-03    0.00   (its onboarding credit covers March)
    GB-2026-000002  beta  2026-03   49.26
    GB-2026-000003  acme  2026-04   71.22
    GB-2026-000004  beta  2026-04  102.94

They are issued in this process (on the test's broker, as a command would) at chosen moments, so
that dates mean something: March's on 2026-04-02, April's on 2026-05-04 (Asia/Shanghai); payment
terms 15 days: due 2026-04-17 and 2026-05-19. Everything else goes through the command line, or —
where the date of the fact is the clock's (a credit note, a write-off) — in this process with a
chosen `now`. The story, in the billing time zone:

    04-02  GB-1 acme 0.00, GB-2 beta 49.26 issued (due 04-17)
    04-10  beta pays 20.00 (payment record)                    → GB-2 asks 29.26
    04-16  bank line 9001 "GB-2026-000002" 29.26                → GB-2 paid
    04-20  bank line 9002 "beta 预付" 60.00                     → nothing owed: 60.00 held as credit (an overpayment)
    04-21  bank line 9003 "货款" 10.00                           → unmatched: listed, not recorded
    05-04  GB-3 acme 71.22, GB-4 beta 102.94 issued (due 05-19); beta's 60.00 credit spent on GB-4 → asks 42.94
    05-10  acme pays 30.00 (payment record)                     → GB-3 asks 41.22
    05-25  goodwill credit note on the paid GB-2: 5.00 + VAT 0.30 = 5.30, all of it refunded (refund-1)
    08-25  GB-3's 41.22 written off (98 days past due)
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from tests.e2e.conftest import FIXTURES
from tests.e2e.test_tenants_e2e import one_line_error

pytestmark = pytest.mark.e2e

GB1, GB2, GB3, GB4 = (f"GB-2026-00000{n}" for n in range(1, 5))
BANK_FILE = (
    "流水号,交易日期,金额,对方户名,附言\n"
    "9001,2026-04-16,29.26,贝塔智算有限公司,GB-2026-000002 余款\n"
    "9002,2026-04-20,60.00,贝塔智算有限公司,beta 预付\n"
    "9003,2026-04-21,10.00,某某公司,货款\n"
)


def at(day: str, hour: int = 2) -> datetime:
    """10:00 in Shanghai on `day` (02:00 UTC)."""
    return datetime.fromisoformat(day).replace(hour=hour, tzinfo=UTC)


def in_process(gpubill, work) -> None:
    """Run `work(db, rules)` on this test's database with the books on its broker, as a command would."""
    from billing.rule_sets import record_rule_set
    from billing_rules import load_rules
    from tests.e2e.books_on import books_on
    from warehouse.connection import open_database

    rules = load_rules(Path(gpubill.env["GPUBILL_RULES"]))
    with open_database(gpubill.env["GPUBILL_CLICKHOUSE"]) as db, books_on(db, gpubill.env["GPUBILL_KAFKA"]):
        record_rule_set(db, rules, Path(gpubill.env["GPUBILL_RULES"]))
        work(db, rules)


def make_the_story(gpubill, tmp_path: Path) -> dict:
    from billing.credit_notes import create_credit_note
    from billing.invoicing import run_period
    from billing.payments import write_off

    gpubill.run("tenant", "add", "acme", "--name", "Acme")
    gpubill.run("tenant", "add", "beta", "--name", "Beta 有限公司", "--legal-name", "贝塔智算有限公司")
    for part in ("readings_part1.ndjson", "readings_part2.ndjson"):
        gpubill.run("replay", str(FIXTURES / part))
        gpubill.run("worker", "--drain")
    in_process(gpubill, lambda db, rules: run_period(db, rules, "2026-03", now=at("2026-04-02")))

    recorded = gpubill.run("payment", "record", "--tenant", "beta", "--amount", "20.00", "--ref", "beta-p1",
                           "--received", "2026-04-10", "--method", "bank")
    assert GB2 in recorded.stdout, recorded.stdout
    bank = tmp_path / "statement.csv"
    bank.write_text(BANK_FILE, encoding="utf-8")
    dry = gpubill.run("payment", "import", str(bank), "--dry-run")
    assert "9003" in dry.stdout, dry.stdout
    assert [p["ref"] for p in gpubill.json("payment", "list", "--json")] == ["beta-p1"]  # a dry run wrote nothing
    imported = gpubill.run("payment", "import", str(bank))
    assert "9003" in imported.stdout + imported.stderr  # the unmatched line listed for review
    again = gpubill.run("payment", "import", str(bank))  # idempotent by the bank's transaction id
    assert sorted(p["ref"] for p in gpubill.json("payment", "list", "--json")) == ["bank-9001", "bank-9002", "beta-p1"]
    assert again.returncode == 0

    gpubill.run("replay", str(FIXTURES / "readings_part3.ndjson"))
    gpubill.run("worker", "--drain")
    in_process(gpubill, lambda db, rules: run_period(db, rules, "2026-04", now=at("2026-05-04")))
    gpubill.run("payment", "record", "--tenant", "acme", "--amount", "30", "--ref", "acme-p1", "--received",
                "2026-05-10", "--method", "alipay")

    def goodwill_and_write_off(db, rules):
        create_credit_note(db, rules, GB2, "goodwill", {1: Decimal("5.00")}, note="outage on 3 March", actor="test",
                           now=at("2026-05-25"), refund="refund-1")
        assert write_off(db, rules, GB3, "customer unreachable", actor="test", now=at("2026-08-25")) == Decimal("41.22")

    in_process(gpubill, goodwill_and_write_off)
    return {"bank": bank}


def answers(gpubill) -> dict:
    """What finance and the tenants read, by the command line."""
    seen: dict = {"invoices": {i["number"]: {k: i[k] for k in ("tenant", "total", "due_date", "paid", "outstanding",
                                                                "payment_state", "overdue", "written_off")}
                               for i in gpubill.json("invoice", "list", "--json")}}
    for day in ("2026-04-09", "2026-04-30", "2026-05-19", "2026-06-19", "2026-08-26"):
        seen[f"aging {day}"] = gpubill.json("receivables", "--as-of", day, "--format", "json")
    seen["statement beta"] = gpubill.json("statement", "--tenant", "beta", "--from", "2026-04-01", "--to",
                                          "2026-06-30", "--format", "json")
    seen["statement beta May"] = gpubill.json("statement", "--tenant", "beta", "--from", "2026-05-01", "--to",
                                              "2026-06-30", "--format", "json")
    seen["payments"] = gpubill.json("payment", "list", "--json")
    seen["invoice GB-4"] = gpubill.json("invoice", "show", "--number", GB4, "--format", "json")
    return seen


def tenants_of(aging: dict) -> dict:
    """{tenant: (current, d1_30, d31_60, d61_90, d90_plus, outstanding, unapplied)} and the total under ''."""
    names = ("current", "d1_30", "d31_60", "d61_90", "d90_plus", "outstanding", "unapplied")
    rows = {row["tenant"]: tuple(row[n] for n in names) for row in aging["tenants"]}
    rows[""] = tuple(aging["total"][n] for n in names)
    return rows


def assert_the_story(seen: dict) -> None:
    z = "0.00"
    assert seen["invoices"] == {
        GB1: {"tenant": "acme", "total": "0.00", "due_date": "2026-04-17", "paid": z, "outstanding": z,
              "payment_state": "paid", "overdue": False, "written_off": z},
        # 20.00 + 29.26 = 49.26: paid before its due date; the goodwill note's 5.30 was refunded, not credited here
        GB2: {"tenant": "beta", "total": "49.26", "due_date": "2026-04-17", "paid": "49.26", "outstanding": z,
              "payment_state": "paid", "overdue": False, "written_off": z},
        # 30.00 paid; 71.22 − 30.00 = 41.22 written off: nothing outstanding, not paid
        GB3: {"tenant": "acme", "total": "71.22", "due_date": "2026-05-19", "paid": "30.00", "outstanding": z,
              "payment_state": "partially_paid", "overdue": False, "written_off": "41.22"},
        # beta's 60.00 credit spent at issue: 102.94 − 60.00 = 42.94, due 2026-05-19, long past
        GB4: {"tenant": "beta", "total": "102.94", "due_date": "2026-05-19", "paid": "60.00", "outstanding": "42.94",
              "payment_state": "partially_paid", "overdue": True, "written_off": z},
    }
    assert (seen["invoice GB-4"]["paid"], seen["invoice GB-4"]["outstanding"], seen["invoice GB-4"]["overdue"]) == (
        "60.00", "42.94", True)
    #                                         current   1–30     31–60    61–90  90+      outstanding unapplied
    # 04-09: before any payment: GB-2 not yet due (04-17)
    assert tenants_of(seen["aging 2026-04-09"]) == {
        "beta": ("49.26", z, z, z, z, "49.26", z), "": ("49.26", z, z, z, z, "49.26", z)}
    # 04-30: GB-2 paid; the bank's 60.00 of 04-20 held as beta's credit
    assert tenants_of(seen["aging 2026-04-30"]) == {
        "beta": (z, z, z, z, z, z, "60.00"), "": (z, z, z, z, z, z, "60.00")}
    # 05-19, the due date of April's invoices (day 0: current): GB-3 71.22 − 30.00; GB-4 102.94 − 60.00
    assert tenants_of(seen["aging 2026-05-19"]) == {
        "acme": ("41.22", z, z, z, z, "41.22", z), "beta": ("42.94", z, z, z, z, "42.94", z),
        "": ("84.16", z, z, z, z, "84.16", z)}
    # 06-19, 31 days past it; the credit note's 5.30 (05-25) was refunded: no credit held
    assert tenants_of(seen["aging 2026-06-19"]) == {
        "acme": (z, z, "41.22", z, z, "41.22", z), "beta": (z, z, "42.94", z, z, "42.94", z),
        "": (z, z, "84.16", z, z, "84.16", z)}
    # 08-26, after the write-off (08-25): acme owes nothing; GB-4 is 99 days past due
    assert tenants_of(seen["aging 2026-08-26"]) == {
        "beta": (z, z, z, z, "42.94", "42.94", z), "": (z, z, z, z, "42.94", "42.94", z)}

    # beta from 04-01 to 06-30: opening 0.00 (nothing before April)
    #   04-02 GB-2 +49.26 → 49.26; 04-10 beta-p1 −20.00 → 29.26; 04-16 bank-9001 −29.26 → 0.00;
    #   04-20 bank-9002 −60.00 → −60.00; 05-04 GB-4 +102.94 → 42.94; 05-25 CN −5.30 → 37.64; refund +5.30 → 42.94
    statement = seen["statement beta"]
    assert (statement["opening_balance"], statement["closing_balance"]) == ("0.00", "42.94")
    assert [(e["date"], e["kind"], e["amount"], e["balance"]) for e in statement["entries"]] == [
        ("2026-04-02", "invoice", "49.26", "49.26"), ("2026-04-10", "payment", "-20.00", "29.26"),
        ("2026-04-16", "payment", "-29.26", "0.00"), ("2026-04-20", "payment", "-60.00", "-60.00"),
        ("2026-05-04", "invoice", "102.94", "42.94"), ("2026-05-25", "credit_note", "-5.30", "37.64"),
        ("2026-05-25", "refund", "5.30", "42.94")]
    may = seen["statement beta May"]
    assert (may["opening_balance"], may["closing_balance"], len(may["entries"])) == ("-60.00", "42.94", 3)

    by_ref = {p["ref"]: p for p in seen["payments"]}
    assert sorted(by_ref) == ["acme-p1", "bank-9001", "bank-9002", "beta-p1"]  # 9003 unmatched: never recorded
    assert (by_ref["bank-9002"]["tenant"], by_ref["bank-9002"]["unapplied"]) == ("beta", "0.00")  # spent on GB-4
    assert [(a["invoice"], a["amount"]) for a in by_ref["bank-9002"]["allocations"]] == [(GB4, "60.00")]
    assert [(a["invoice"], a["amount"]) for a in by_ref["bank-9001"]["allocations"]] == [(GB2, "29.26")]


def test_payments_receivables_and_statement_survive_a_rebuild(gpubill, tmp_path):
    story = make_the_story(gpubill, tmp_path)
    before = answers(gpubill)
    assert_the_story(before)

    # refused, one line each, nothing written
    for args, says in (
            (("payment", "record", "--tenant", "beta", "--amount", "20.00", "--ref", "beta-p1", "--received",
              "2026-04-11"), "beta-p1"),  # a ref reused with other content
            (("payment", "record", "--tenant", "nobody", "--amount", "1", "--ref", "x-1", "--received",
              "2026-04-11"), "nobody"),
            (("payment", "record", "--tenant", "beta", "--amount", "50", "--ref", "x-2", "--received", "2026-06-01",
              "--invoice", f"{GB4}=50.00"), "outstanding"),  # GB-4 asks 42.94
            (("statement", "--tenant", "beta", "--from", "2026-06-01", "--to", "2026-05-01", "--format", "json"),
             "--from")):
        assert says in one_line_error(gpubill.run(*args, check=False))
    assert gpubill.json("payment", "list", "--json") == before["payments"]

    # -- the database is lost; the log is not
    shutil.rmtree(Path(gpubill.env["GPUBILL_CLICKHOUSE"].removeprefix("chdb://")))
    gpubill.run("rebuild", "--yes")
    after = answers(gpubill)
    assert [name for name in before if after[name] != before[name]] == []
    # and the bank file again changes nothing: every line already recorded, the unmatched one still listed
    gpubill.run("payment", "import", str(story["bank"]))
    assert gpubill.json("payment", "list", "--json") == before["payments"]
