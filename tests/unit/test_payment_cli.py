"""`gpubill payment …`, `invoice write-off` and `credit-note create --refund` as a user runs them: in a
process of their own (UNLOGGED_CLI: the books with no broker), on tests/unit/test_payments.py's books:

    GB-2026-000001  t01 2026-02  106.00   issued 2026-03-05, due 2026-03-20
    GB-2026-000002  t01 2026-03  212.00   issued 2026-04-05, due 2026-04-20
    GB-2026-000003  t02 2026-03   53.00   issued 2026-04-05, due 2026-04-20

Bad input is one line on stderr and exit 1, and the tables money is written to are as they were
(rows counted as stored, no FINAL); an import lists every bad line, then that one line. Every
figure expected is worked out by hand in a comment.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.cli_run import UNLOGGED_CLI
from tests.unit.test_payments import GB1, GB2, GB3, _seed, stored
from tests.unit.test_tenants import assert_one_printable_line
from warehouse.connection import open_database

RULES_DIR = Path(__file__).parents[1] / "e2e" / "rules"
HEADER = "流水号,交易日期,金额,对方户名,附言\n"


@pytest.fixture(scope="module")
def templates(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("payment-cli")
    _seed(root / "feb", march=False)
    _seed(root / "both", march=True)
    return {"feb": root / "feb", "both": root / "both"}


class Books:
    """A copy of a seeded database, and `gpubill` run on it."""

    def __init__(self, path: Path, home: Path) -> None:
        self.path, self.home = path, home

    def __call__(self, *args: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "GPUBILL_CLICKHOUSE": f"chdb://{self.path}", "GPUBILL_RULES": str(RULES_DIR),
               "GPUBILL_ROLLUP_MARGIN_S": "0", "NO_COLOR": "1", "COLUMNS": "200", "GPUBILL_HOME": str(self.home)}
        return subprocess.run([sys.executable, UNLOGGED_CLI, *args], env=env, cwd=self.home, capture_output=True,
                              text=True, timeout=300)

    def ok(self, *args: str) -> list[str]:
        done = self(*args)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return [line.rstrip() for line in done.stdout.splitlines() if line.strip()]

    def json(self, *args: str):
        return json.loads(self.ok(*args, "--json")[0])

    def rows(self) -> dict[str, int]:
        with open_database(f"chdb://{self.path}") as db:
            return stored(db)

    def refused(self, *args: str, fragment: str) -> str:
        """`args` refused in one line, exit 1, nothing written."""
        before = self.rows()
        done = self(*args)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
        assert fragment in lines[0], (fragment, lines[0])
        assert_one_printable_line(lines[0])
        assert self.rows() == before
        return lines[0]


def _books(templates, which: str, tmp_path: Path) -> Books:
    shutil.copytree(templates[which], tmp_path / "ch", symlinks=True)
    (tmp_path / "home").mkdir()
    return Books(tmp_path / "ch", tmp_path / "home")


@pytest.fixture
def gpubill(templates, tmp_path) -> Books:
    return _books(templates, "both", tmp_path)


def statement(tmp_path: Path, *lines: str, name: str = "statement.csv") -> str:
    path = tmp_path / name
    path.write_text(HEADER + "".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


# ---------------------------------------------------------------------------------------- record


def test_record_says_where_the_payment_went_and_again_changes_nothing(gpubill):
    args = ("payment", "record", "--tenant", "t01", "--amount", "150", "--ref", "pay-1", "--received", "2026-04-06")
    # oldest due first: GB1 takes its 106.00, GB2 the other 44.00 (212.00 − 44.00 = 168.00 left)
    assert gpubill.ok(*args) == [
        "recorded pay-1: 150.00 CNY from t01, received 2026-04-06 (bank)",
        f"  {GB1}          106.00  (paid, outstanding 0.00)",
        f"  {GB2}           44.00  (partially_paid, outstanding 168.00)"]
    rows = gpubill.rows()
    assert gpubill.ok(*args, "--note", "again") == [
        "pay-1: 150.00 CNY from t01, received 2026-04-06 (bank) is already recorded; nothing changed"]
    assert gpubill.rows() == rows
    shown = gpubill.json("payment", "show", "pay-1")
    assert (shown["amount"], shown["allocations"], shown["unapplied"], shown["source"]) == (
        "150.00", [{"invoice": GB1, "amount": "106.00"}, {"invoice": GB2, "amount": "44.00"}], "0.00", "manual")


def test_named_invoices_an_amount_for_one_and_the_rest_held_as_credit(gpubill):
    # GB2=50.00 exactly, GB1 what it asks (106.00); of 200.00, 44.00 is left: held
    assert gpubill.ok("payment", "record", "--tenant", "t01", "--amount", "200", "--ref", "pay-1", "--received",
                      "2026-04-06", "--invoice", f"{GB2}=50", "--invoice", GB1, "--method", "alipay") == [
        "recorded pay-1: 200.00 CNY from t01, received 2026-04-06 (alipay)",
        f"  {GB1}          106.00  (paid, outstanding 0.00)",
        f"  {GB2}           50.00  (partially_paid, outstanding 162.00)",  # 212.00 − 50.00
        "  held as credit           44.00"]
    # a partial payment of t02's GB3: 20.00 of 53.00
    assert gpubill.ok("payment", "record", "--tenant", "t02", "--amount", "20", "--ref", "pay-2", "--received",
                      "2026-04-07")[1:] == [f"  {GB3}           20.00  (partially_paid, outstanding 33.00)"]
    listed = gpubill.ok("payment", "list")
    assert [line.split("│")[1:-1] for line in listed if "pay-" in line] == [
        [" pay-1 ", " t01    ", " 2026-04-06 ", " alipay ", " 200.00 ", "    156.00 ", "     44.00 ", "          "],
        [" pay-2 ", " t02    ", " 2026-04-07 ", " bank   ", "  20.00 ", "     20.00 ", "      0.00 ", "          "]]
    assert [p["ref"] for p in gpubill.json("payment", "list", "--tenant", "t02")] == ["pay-2"]
    # the credit held is spent by `payment apply` on GB2's 162.00: 44.00, 118.00 left
    assert gpubill.ok("payment", "apply", "--tenant", "t01") == [
        "applied 44.00 CNY of t01's credit; 0.00 CNY still held", f"  {GB2}  44.00"]
    assert gpubill.ok("payment", "apply", "--tenant", "t01") == [
        "nothing applied: t01 holds 0.00 CNY of credit and there is none to spend"]


def test_credit_held_is_spent_by_the_next_invoice_run(templates, tmp_path):
    gpubill = _books(templates, "feb", tmp_path)  # GB1 issued; March not invoiced yet
    assert gpubill.ok("payment", "record", "--tenant", "t01", "--amount", "300", "--ref", "pay-1", "--received",
                      "2026-03-12")[1:] == [f"  {GB1}          106.00  (paid, outstanding 0.00)",
                                            "  held as credit          194.00"]  # 300.00 − 106.00
    gpubill.ok("invoice", "run", "--period", "2026-03", "--offline")
    # GB2 (212.00) spends the 194.00 as it is issued: the payment holds nothing any more
    shown = gpubill.json("payment", "show", "pay-1")
    assert (shown["allocations"], shown["unapplied"]) == (
        [{"invoice": GB1, "amount": "106.00"}, {"invoice": GB2, "amount": "194.00"}], "0.00")
    # reversed (bounced): both invoices ask everything again
    assert gpubill.ok("payment", "reverse", "pay-1", "--reason", "bounced")[1:] == [
        f"  {GB1}  106.00 outstanding again", f"  {GB2}  194.00 outstanding again"]
    assert gpubill.json("payment", "show", "pay-1")["reversal_reason"] == "bounced"
    gpubill.refused("payment", "reverse", "pay-1", "--reason", "again", fragment="payment pay-1 was already reversed")


# ------------------------------------------------------------------------- write-off, credit notes


def test_a_write_off_then_a_payment_that_recovers_it(gpubill):
    assert gpubill.ok("invoice", "write-off", GB1, "--reason", "customer gone") == [
        f"{GB1}: 106.00 CNY written off as uncollectible; a later payment to it still counts"]
    gpubill.refused("invoice", "write-off", GB1, "--reason", "again", fragment=f"{GB1} has nothing outstanding")
    gpubill.refused("invoice", "write-off", GB2, "--reason", " ", fragment="--reason is required")
    gpubill.refused("invoice", "write-off", "GB-2026-000009", "--reason", "gone", fragment="no invoice 'GB-2026-000009'")
    gpubill.refused("invoice", "write-off", "DRAFT-0A1B2C3D4E5F", "--reason", "gone",
                    fragment="'DRAFT-0A1B2C3D4E5F' is not an invoice number GB-YYYY-NNNNNN")
    # named, 30.00 reaches what was written off: 76.00 stays written off (106.00 − 30.00)
    assert gpubill.ok("payment", "record", "--tenant", "t01", "--amount", "30", "--ref", "pay-1", "--received",
                      "2026-04-08", "--invoice", GB1)[1:] == [
        f"  {GB1}           30.00  (partially_paid, outstanding 0.00, written off 76.00)"]


def test_a_credit_note_on_a_paid_invoice_is_credit_or_with_refund_a_refund_never_both(gpubill):
    gpubill.ok("payment", "record", "--tenant", "t01", "--amount", "106", "--ref", "pay-1", "--received", "2026-04-06")
    # line 1 (rent) 10.00 + VAT 6 % 0.60 = 10.60; GB1 is paid: all of it beyond
    assert gpubill.ok("credit-note", "create", "--invoice", GB1, "--reason", "goodwill", "--line", "1=10") == [
        f"CN-2026-000001 credits {GB1}: 10.00 + VAT 0.60 = 10.60 CNY: nothing to {GB1} (it asked nothing more); "
        "10.60 held as t01's credit"]
    made = gpubill.json("credit-note", "create", "--invoice", GB1, "--reason", "goodwill", "--line", "1=10",
                        "--refund", "rf-1")
    assert [(n["number"], n["to_invoice"], n["refunded"], n["credit"], n["refund_ref"]) for n in made] == [
        ("CN-2026-000002", "0.00", "10.60", "0.00", "rf-1")]
    # GB2 asks 212.00: a note of 10.60 all goes to it, so there is nothing to refund
    gpubill.refused("credit-note", "create", "--invoice", GB2, "--reason", "goodwill", "--line", "1=10", "--refund",
                    "rf-2", fragment="nothing to refund")
    gpubill.refused("credit-note", "create", "--invoice", GB1, "--reason", "goodwill", "--line", "1=1", "--refund",
                    "rf-1", fragment="refund ref rf-1 is already recorded")
    gpubill.refused("credit-note", "create", "--invoice", GB1, "--reason", "goodwill", "--line", "1=1", "--refund",
                    "rf 3", fragment="ref 'rf 3' is not an id")
    # a partly paid invoice: the note reduces what it asks first. t02 pays 50.00 of GB3's 53.00;
    # 10.00 + 0.60: 3.00 to GB3, 7.60 refunded
    gpubill.ok("payment", "record", "--tenant", "t02", "--amount", "50", "--ref", "pay-2", "--received", "2026-04-06")
    assert gpubill.ok("credit-note", "create", "--invoice", GB3, "--reason", "goodwill", "--line", "1=10",
                      "--refund", "rf-3") == [
        f"CN-2026-000003 credits {GB3}: 10.00 + VAT 0.60 = 10.60 CNY: 3.00 to {GB3}; 7.60 refunded as rf-3"]


# ---------------------------------------------------------------------------------------- bad input


RECORD = ("payment", "record", "--tenant", "t01", "--ref", "pay-9", "--received", "2026-04-06")


@pytest.mark.parametrize("args, fragment", [
    ((*RECORD, "--amount", "0"), "--amount 0 must be above zero"),
    ((*RECORD, "--amount", "-5"), "--amount '-5' is not an amount"),
    ((*RECORD, "--amount", "NaN"), "--amount 'NaN' is not an amount"),
    ((*RECORD, "--amount", "1.001"), "--amount '1.001' is not an amount"),
    ((*RECORD, "--amount", "1e9"), "--amount '1e9' is not an amount"),
    ((*RECORD, "--amount", "100000000.01"), "above the cap of 100000000.00"),
    (("payment", "record", "--tenant", "t01", "--ref", "pay-1", "--received", "2026-04-06", "--amount", "7"),
     "ref pay-1 is already recorded as 5.00 CNY from t01"),
    ((*RECORD, "--amount", "200", "--invoice", f"{GB1}=101.01"),  # pay-1 took 5.00 of 106.00
     f"{GB1} asks 101.00 more, the payment gives it 101.01: an allocation above what is outstanding"),
    ((*RECORD, "--amount", "10", "--invoice", f"{GB1}=6", "--invoice", f"{GB2}=6"),
     "the allocations add up to more than the payment (10.00)"),
    ((*RECORD, "--amount", "10", "--invoice", GB3), f"{GB3} is not an issued invoice of t01"),
    ((*RECORD, "--amount", "10", "--invoice", "DRAFT-0A1B2C3D4E5F"), "--invoice 'DRAFT-0A1B2C3D4E5F' is not an invoice"),
    ((*RECORD, "--amount", "10", "--invoice", f"{GB1}=0"), "must be above zero"),
    (("payment", "record", "--tenant", "t09", "--ref", "pay-9", "--received", "2026-04-06", "--amount", "10"),
     "tenant t09 is not registered"),
    (("payment", "record", "--tenant", "t01", "--ref", "pay 9", "--received", "2026-04-06", "--amount", "10"),
     "ref 'pay 9' is not an id"),
    (("payment", "record", "--tenant", "t01", "--ref", "pay-9", "--received", "2099-01-01", "--amount", "10"),
     "--received 2099-01-01 is after today"),
    (("payment", "record", "--tenant", "t01", "--ref", "pay-9", "--received", "6.4.2026", "--amount", "10"),
     "is not a date YYYY-MM-DD"),
    ((*RECORD, "--amount", "10", "--method", "cash"), "--method: 'cash' is not one of bank, alipay, wechat, card, other"),
    (("payment", "record", "--tenant", "t01", "--amount", "10", "--ref", "pay-9"), "Missing option '--received'"),
    (("payment", "show", "pay-404"), "no payment pay-404"),
    (("payment", "reverse", "pay-404", "--reason", "x"), "no payment pay-404"),
    (("payment", "apply", "--tenant", "t01", "--invoice", f"{GB2}=1"), "name it without =AMOUNT"),
])
def test_bad_input_is_one_line_exit_1_and_nothing_written(gpubill, args, fragment):
    gpubill.ok("payment", "record", "--tenant", "t01", "--amount", "5", "--ref", "pay-1", "--received", "2026-04-06")
    gpubill.refused(*args, fragment=fragment)


def test_a_payment_to_a_voided_invoice_is_refused(gpubill):
    gpubill.ok("invoice", "void", GB3, "--reason", "wrong contract")
    gpubill.refused("payment", "record", "--tenant", "t02", "--amount", "10", "--ref", "pay-1", "--received",
                    "2026-04-06", "--invoice", GB3, fragment=f"{GB3} is voided")
    gpubill.refused("invoice", "write-off", GB3, "--reason", "gone", fragment=f"{GB3} is voided")


# ------------------------------------------------------------------------------------------- import


def test_an_import_records_matched_lines_lists_unmatched_ones_and_is_idempotent(gpubill, tmp_path):
    file = statement(tmp_path,
                     "TX001,2026-04-07,100.00,甲公司,货款 GB-2026-000002",  # by invoice number: GB2
                     'TX002,2026/04/08,"1,000.00",乙公司,t02 April',  # by tenant: GB3's 53.00, 947.00 held
                     "TX003,20260408,5.00,丙,thanks")  # neither: for review
    before = gpubill.rows()
    dry = gpubill.ok("payment", "import", file, "--dry-run")
    assert gpubill.rows() == before  # a dry run writes nothing
    assert [line.split()[:2] + line.split()[5:6] for line in dry[:3]] == [
        ["line", "2", "t01"], ["line", "3", "t02"], ["line", "4", "unmatched:"]]
    assert dry[0].endswith(f"(remittance names {GB2} of t01): would be recorded")
    assert dry[3] == ("3 receipts: 2 would be recorded (1100.00 CNY), 0 already imported, 1 unmatched (5.00 CNY) "
                      "for review: record each with `gpubill payment record --ref bank-<transaction id>`; nothing was "
                      "written (--dry-run)")
    done = gpubill.ok("payment", "import", file)
    assert done[0].endswith(f"t01 (remittance names {GB2} of t01): recorded: {GB2} 100.00")
    assert done[1].endswith("t02 (remittance names tenant t02): recorded: GB-2026-000003 53.00, held as credit 947.00")
    assert "unmatched: no invoice number or registered tenant id in the remittance (payer 丙" in done[2]
    assert done[3].startswith("3 receipts: 2 recorded (1100.00 CNY), 0 already imported, 1 unmatched (5.00 CNY)")
    recorded = {p["ref"]: p for p in gpubill.json("payment", "list")}
    assert set(recorded) == {"bank-TX001", "bank-TX002"}
    one = recorded["bank-TX002"]
    assert (one["source"], one["method"], one["bank_txn"], one["payer"], one["remittance"], one["received_on"],
            one["amount"]) == ("bank_import", "bank", "TX002", "乙公司", "t02 April", "2026-04-08", "1000.00")
    # again: each line is already imported, nothing changes
    rows = gpubill.rows()
    again = gpubill.ok("payment", "import", file)
    assert [line.endswith("already imported; skipped") for line in again[:2]] == [True, True]
    assert again[3].startswith("3 receipts: 0 recorded (0.00 CNY), 2 already imported, 1 unmatched")
    assert gpubill.rows() == rows


def _refused_import(gpubill: Books, file: str, *reasons: str) -> list[str]:
    """The import refused: each bad line on stderr (in order), then one error line; exit 1, nothing written."""
    before = gpubill.rows()
    done = gpubill("payment", "import", file)
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == len(reasons) + 1, done.stderr
    for line, reason in zip(lines, reasons):
        assert line.startswith(f"{file} line ") and reason in line, (reason, line)
    assert lines[-1] == (f"error: {len(reasons)} bad line{'s' if len(reasons) > 1 else ''} in {file}: nothing was "
                         "written; fix them and import the file again")
    assert gpubill.rows() == before
    return lines


def test_one_bad_line_and_the_import_writes_nothing_every_bad_line_is_reported(gpubill, tmp_path):
    file = statement(tmp_path,
                     "TX001,2026-04-07,100.00,甲,GB-2026-000002",  # good: not written either
                     "TX002,2026-04-31,10.00,乙,t02",  # no such date
                     "TX003,2026-04-07,-5.00,乙,t02",  # a debit
                     "TX004,2026-04-07,1.001,乙,t02",  # three decimals
                     "TX005,2026-04-07,0,乙,t02",  # zero
                     "TX006,2026-04-07,NaN,乙,t02",
                     "TX007,2026-04-07,100000000.01,乙,t02",  # above the cap
                     "TX008,2026-04-07,1.00,乙",  # a field missing
                     "TX001,2026-04-08,2.00,乙,t02",  # TX001 again
                     "TX009,2099-04-07,1.00,乙,t02")  # after today
    lines = _refused_import(gpubill, file, "line 3: the date", "line 4: a debit", "line 5: ", "line 6: the amount is zero",
                            "line 7: the amount", "line 8: the amount", "line 9: 4 fields where the header has 5",
                            "line 10: the transaction id TX001 repeats line 2", "line 11: the date 2099-04-07 is after today")
    assert "more than two decimals" in lines[2]
    # the dry run shows the same, exit 1
    dry = gpubill("payment", "import", file, "--dry-run")
    assert dry.returncode == 1 and dry.stderr.strip().splitlines() == lines


def test_a_transaction_imported_before_with_other_content_is_refused(gpubill, tmp_path):
    gpubill.ok("payment", "import", statement(tmp_path, "TX001,2026-04-07,100.00,甲,GB-2026-000002", name="one.csv"))
    for changed in ("TX001,2026-04-07,100.01,甲,GB-2026-000002", "TX001,2026-04-06,100.00,甲,GB-2026-000002",
                    "TX001,2026-04-07,100.00,乙,GB-2026-000002", "TX001,2026-04-07,100.00,甲,GB-2026-000001"):
        file = statement(tmp_path, "TX002,2026-04-07,5.00,丙,t02", changed, name="two.csv")
        _refused_import(gpubill, file, "line 3: transaction TX001 is already recorded as payment bank-TX001 "
                        "(100.00 CNY received 2026-04-07, payer '甲') with other content")


def test_a_statement_without_a_required_column_or_not_csv_is_one_line(gpubill, tmp_path):
    missing = tmp_path / "missing.csv"
    missing.write_text("流水号,交易日期,金额,对方户名\nTX001,2026-04-07,100.00,甲\n", encoding="utf-8")
    gpubill.refused("payment", "import", str(missing), fragment="the header (line 1) has no remittance column")
    workbook = tmp_path / "statement.xlsx"
    workbook.write_bytes(b"PK\x03\x04 not really a workbook")
    gpubill.refused("payment", "import", str(workbook), fragment="an Excel workbook")
    gpubill.refused("payment", "import", str(tmp_path / "nowhere.csv"), fragment="cannot read")
    gpubill.refused("payment", "import", str(tmp_path), fragment="is a directory")


def test_an_import_in_gb18030_with_only_unmatched_lines_records_nothing_and_says_so(gpubill, tmp_path):
    file = tmp_path / "gbk.csv"
    file.write_bytes((HEADER + "TX001,2026-04-07,8.00,丁,无法识别\n").encode("gb18030"))
    rows = gpubill.rows()
    done = gpubill.ok("payment", "import", str(file))
    assert done[-1].startswith("1 receipt: 0 recorded (0.00 CNY), 0 already imported, 1 unmatched (8.00 CNY)")
    assert "remittance '无法识别'" in done[0]
    assert gpubill.rows() == rows
