"""A goodwill credit note stands through a void or a re-rating (issue 36, item 2): the replacement
carries it as a concession line naming the note, before tax, capped at what the replacement still
charges; price_error, usage_error and duplicate notes are superseded by the correction; a note of a
reason this gpubill does not know refuses the void and the re-rating, nothing written.

The issue's scenario, on the embedded ClickHouse (no broker): tenant t01 (unregistered: no trial
credit) rents one H800 on the hourly plan at ¥36/h = ¥0.01/s for 1,241 s of March 2026 (from
2026-03-01 00:00 Shanghai); VAT 6 %:

    GB-2026-000001  rent 1,241 × 0.01 = 12.41; VAT round(0.7446) = 0.74; total 13.15
    CN-2026-000001  goodwill, 5.00 of line 1; VAT round(0.30) = 0.30; total 5.30 → owed 7.85
    the cut         H800 at ¥18/h (¥0.005/s) from 00:00:19 local: 19 × 0.01 + 1,222 × 0.005
                    = 0.19 + 6.11 = 6.30; VAT round(0.378) = 0.38; 6.68, the cut 13.15 − 6.68 = 6.47
    replacement     6.30 − 5.00 goodwill = 1.30 net; VAT round(0.078) = 0.08; total 1.38
                    = 7.85 − 6.47: down exactly the cut (before: 6.68, down 1.17, the goodwill gone)
"""

from __future__ import annotations

import shutil
from decimal import Decimal as D
from fractions import Fraction
from pathlib import Path

import pytest

from tests.unit.cli_run import UNLOGGED_CLI

from billing import invoice_store
from billing.concessions import UnknownCreditNote
from billing.credit_notes import create_credit_note, credit_notes, void_invoice
from billing.invoicing import run_period
from billing.rerate import rerate_apply, rerate_preview
from billing_rules import Concession, CreditBalance, RentUsage, UnknownCreditReason, build_invoice, fate_of, load_rules
from tests.unit.test_invoice_lifecycle import fen
from tests.unit.test_invoice_lock_runs import NOW, PERIOD, db, no_margin, seed_tenants  # noqa: F401 (fixtures)

VAT = Fraction(6, 100)
E2E_RULES = Path(__file__).parents[1] / "e2e" / "rules"
H800 = """
[model.H800]
name = "NVIDIA H800 80GB"

[[model.H800.price]]
effective_from = 2025-01-01
monthly = 3180.00
hourly = 36.00                    # ¥0.01 per second
"""


def h800_rules(directory: Path, cut_from: str | None = None):
    """tests/e2e/rules with an H800 at ¥36/h; with `cut_from` (local time), ¥18/h from then on."""
    shutil.copytree(E2E_RULES, directory)
    catalog = directory / "catalog.toml"
    cut = "" if cut_from is None else f"""
[[model.H800.price]]
effective_from = {cut_from}
monthly = 3180.00
hourly = 18.00                    # the cut: ¥0.005 per second
"""
    catalog.write_text(catalog.read_text() + H800 + cut)
    return load_rules(directory)


def owed(db, tenant: str = "t01") -> D:
    """What the tenant owes for the period: its invoices (issued and voided) less their credit notes."""
    return invoice_store.charged(db, tenant)[tenant][PERIOD]


# ------------------------------------------------------------------ the pure part: build_invoice


def rent(seconds: int) -> RentUsage:
    return RentUsage("H800", "hourly", D(36), 3600, seconds)  # ¥0.01 per second


CASES = [
    # (rent seconds, concessions (note, amount), credit left, concession lines, credit line, net, tax, total)
    # 1,241 s = 12.41 − 5.00 = 7.41; VAT round(0.4446) = 0.44; 7.85
    (1241, [("CN-1", "5.00")], "0", ["-5.00"], None, "7.41", "0.44", "7.85"),
    # 630 s = 6.30 − 5.00 = 1.30; VAT round(0.078) = 0.08; 1.38
    (630, [("CN-1", "5.00")], "0", ["-5.00"], None, "1.30", "0.08", "1.38"),
    # a concession larger than the charges is capped at them: 6.30 − 6.30 = 0, never negative
    (630, [("CN-1", "10.00")], "0", ["-6.30"], None, "0.00", "0.00", "0.00"),
    # two, in note order: 5.00, then only the 1.30 still owed
    (630, [("CN-1", "5.00"), ("CN-2", "3.00")], "0", ["-5.00", "-1.30"], None, "0.00", "0.00", "0.00"),
    # concessions before credit grants: 6.30 − 5.00 = 1.30, the grant spends 1.30 of its 2.00 (0.70 stays)
    (630, [("CN-1", "5.00")], "2.00", ["-5.00"], "-1.30", "0.00", "0.00", "0.00"),
    # none (every first invoice): 6.30; VAT 0.38; 6.68
    (630, [], "0", [], None, "6.30", "0.38", "6.68"),
]


@pytest.mark.parametrize("seconds, notes, credit, conceded, credited, net, tax, total", CASES)
def test_build_invoice_carries_concessions_before_tax_capped_at_what_is_owed(seconds, notes, credit, conceded, credited,
                                                                            net, tax, total):
    credits = [CreditBalance("trial", "Trial credit", D(credit))] if D(credit) else []
    draft = build_invoice("t01", PERIOD, [rent(seconds)], [], [], credits, D("0.06"),
                          [Concession(n, D(a)) for n, a in notes])
    lines = [(ln.kind, ln.credit_id, ln.description, ln.amount) for ln in draft.lines if ln.kind == "concession"]
    assert lines == [("concession", n, f"Goodwill credit {n}", D(a)) for (n, _), a in zip(notes, conceded)]
    assert [ln.amount for ln in draft.lines if ln.kind == "credit"] == ([D(credited)] if credited else [])
    assert (draft.net, draft.tax, draft.total) == (D(net), D(tax), D(total))
    assert draft.credit_used == (-D(credited) if credited else D("0.00"))  # grants only
    assert sum(ln.amount for ln in draft.lines) == draft.net  # the lines add up to the net


@pytest.mark.parametrize("reason, fate", [("goodwill", "carried"), ("price_error", "superseded"),
                                          ("usage_error", "superseded"), ("duplicate", "superseded"),
                                          ("void", "superseded"), ("rerate", "superseded")])
def test_every_reason_gpubill_writes_has_a_fate(reason, fate):
    from billing.credit_notes import REASONS

    assert fate_of(reason) == fate and reason in REASONS


def test_a_reason_not_known_has_no_fate_and_a_concession_is_whole_fen_above_zero():
    with pytest.raises(UnknownCreditReason, match="'promo'"):
        fate_of("promo")
    for bad in (D("0"), D("-1.00"), D("0.001")):
        with pytest.raises(ValueError):
            Concession("CN-1", bad)


# ------------------------------------------------------------------ through the database


def invoiced_with_goodwill(db, tmp_path, goodwill: str = "5.00", price_error: str | None = None):
    """The scenario's invoice (13.15) with a goodwill note of `goodwill` before tax (and a price_error note)."""
    seed_tenants(db, {"t01": 1241}, gpu_model="H800", hourly=D(36))
    rules = h800_rules(tmp_path / "before")
    run_period(db, rules, PERIOD, now=NOW)
    (invoice,) = invoice_store.headers(db, period=PERIOD)
    assert (invoice.number, invoice.net, invoice.total) == ("GB-2026-000001", D("12.41"), D("13.15"))
    create_credit_note(db, rules, "GB-2026-000001", "goodwill", {1: D(goodwill)}, note="SLA missed", now=NOW)
    if price_error:
        create_credit_note(db, rules, "GB-2026-000001", "price_error", {1: D(price_error)}, now=NOW)
    return rules


def test_the_issue_scenario_a_rerate_apply_keeps_the_goodwill_and_the_bill_goes_down_exactly_the_cut(db, tmp_path):
    invoiced_with_goodwill(db, tmp_path)
    assert owed(db) == D("13.15") - D("5.30") == D("7.85")
    rules = h800_rules(tmp_path / "cut", cut_from="2026-03-01T00:00:19")
    (change,) = rerate_preview(db, rules, PERIOD).tenants
    # the dry run: the invoice's 13.15 → the replacement's 1.38; owed 7.85 → 1.38, −6.47 = the cut
    cut = D("13.15") - fen((Fraction(19, 100) + Fraction(1222, 200)) * (1 + VAT))
    assert cut == D("6.47")
    assert (change.old_total, change.new_total, change.old_owed, change.new_owed, change.replaced) == (
        D("13.15"), D("1.38"), D("7.85"), D("1.38"), True)
    assert change.difference == -cut
    assert [(f.number, f.reason, f.fate, f.carried, f.unused) for f in change.notes] == [
        ("CN-2026-000001", "goodwill", "carried", D("5.00"), D("0.00"))]
    assert [(ln.kind, ln.old_amount, ln.new_amount) for ln in change.lines if ln.kind == "concession"] == [
        ("concession", None, D("-5.00"))]

    report = rerate_apply(db, rules, PERIOD, now=NOW)
    assert [i for i, _ in report.voided] == ["GB-2026-000001"] and report.issued == ["GB-2026-000002"]
    replacement = invoice_store.find(db, "GB-2026-000002")
    # 0.19 + 6.11 = 6.30 − 5.00 = 1.30 net; VAT round(0.078) = 0.08; 1.38
    assert (replacement.replaces, replacement.net, replacement.tax, replacement.total) == (
        "GB-2026-000001", D("1.30"), D("0.08"), D("1.38"))
    assert [(ln.kind, ln.credit_id, ln.amount) for ln in replacement.lines if ln.kind == "concession"] == [
        ("concession", "CN-2026-000001", D("-5.00"))]
    # the tenant's effective bill: the corrected charges less the goodwill, down exactly the cut
    assert owed(db) == D("6.68") - D("5.30") == D("7.85") - cut == D("1.38")
    # a second apply changes nothing: the replacement already carries the concession
    again = rerate_apply(db, rules, PERIOD, now=NOW)
    assert (again.voided, again.issued) == ([], []) and owed(db) == D("1.38")
    assert [t.difference for t in again.tenants] == [D("0.00")]


def test_a_void_and_its_replacement_keep_the_goodwill(db, tmp_path):
    rules = invoiced_with_goodwill(db, tmp_path)
    void_invoice(db, rules, "GB-2026-000001", "billed to the wrong contract", now=NOW)
    run_period(db, rules, PERIOD, now=NOW)
    replacement = invoice_store.current(db, "t01", PERIOD)
    # 12.41 − 5.00 = 7.41 net; VAT round(0.4446) = 0.44; 7.85: the bill is what it was (before: 13.15)
    assert (replacement.number, replacement.net, replacement.total) == ("GB-2026-000002", D("7.41"), D("7.85"))
    assert owed(db) == D("7.85")
    # voided again, the next replacement carries the same note again (it is on the first voided invoice)
    void_invoice(db, rules, "GB-2026-000002", "once more", now=NOW)
    run_period(db, rules, PERIOD, now=NOW)
    assert invoice_store.current(db, "t01", PERIOD).total == D("7.85") and owed(db) == D("7.85")


@pytest.mark.parametrize("goodwill, cut_from, before, after, carried", [
    # a small cut (from 00:17:21: 1,041 × 0.01 + 200 × 0.005 = 11.41; VAT 0.68; 12.09, the cut 1.06):
    #   11.41 − 5.00 = 6.41; VAT round(0.3846) = 0.38; 6.79 = 7.85 − 1.06 (before: 12.09, up 4.24)
    ("5.00", "2026-03-01T00:17:21", D("7.85"), D("6.79"), ("5.00", "0.00")),
    # a goodwill larger than the corrected charges (10.00 + VAT 0.60 = 10.60 on 13.15: owed 2.55):
    #   the concession is capped at the 6.30 charged, the replacement is 0.00; 3.70 stays unused
    #   with the period (before: 6.68, up 4.13)
    ("10.00", "2026-03-01T00:00:19", D("2.55"), D("0.00"), ("6.30", "3.70")),
])
def test_a_goodwill_larger_than_the_cut_never_makes_the_cut_raise_the_bill(db, tmp_path, goodwill, cut_from, before,
                                                                           after, carried):
    invoiced_with_goodwill(db, tmp_path, goodwill=goodwill)
    assert owed(db) == before
    rules = h800_rules(tmp_path / "cut", cut_from=cut_from)
    (change,) = rerate_preview(db, rules, PERIOD).tenants
    assert [(f.fate, f.carried, f.unused) for f in change.notes] == [("carried", D(carried[0]), D(carried[1]))]
    rerate_apply(db, rules, PERIOD, now=NOW)
    assert owed(db) == after <= before
    assert invoice_store.current(db, "t01", PERIOD).total >= 0


def test_a_price_error_note_is_superseded_by_the_correction_and_the_goodwill_carried(db, tmp_path):
    # CN-2026-000002 price_error 1.00; VAT on the running total round(6.00 × 0.06) − 0.30 = 0.06: 1.06
    invoiced_with_goodwill(db, tmp_path, price_error="1.00")
    assert owed(db) == D("13.15") - D("5.30") - D("1.06") == D("6.79")
    rules = h800_rules(tmp_path / "cut", cut_from="2026-03-01T00:00:19")
    (change,) = rerate_preview(db, rules, PERIOD).tenants
    assert [(f.number, f.fate) for f in change.notes] == [("CN-2026-000001", "carried"), ("CN-2026-000002", "superseded")]
    assert "superseded by the correction" in change.notes[1].text()
    rerate_apply(db, rules, PERIOD, now=NOW)
    # the replacement carries the goodwill only: 6.30 − 5.00 → 1.38
    assert invoice_store.current(db, "t01", PERIOD).total == D("1.38") and owed(db) == D("1.38")


def test_an_earlier_note_of_a_reason_not_known_refuses_the_void_and_the_rerate_nothing_written(db, tmp_path):
    from billing.credit_notes import _HEADER

    invoiced_with_goodwill(db, tmp_path)
    # a note written by another tool (or a later gpubill) with a reason this one does not know
    db.insert("credit_notes", [("CN-2026-000009", 2026, 9, "GB-2026-000001", "t01", PERIOD, "promo", "", "finance",
                                NOW, "CNY", D("1.00"), D("0.06"), D("1.06"), D("0.06"))], _HEADER)
    rules = h800_rules(tmp_path / "cut", cut_from="2026-03-01T00:00:19")
    generations = db.query("SELECT count() FROM rollup_runs")[0][0]
    for attempt in (lambda: rerate_apply(db, rules, PERIOD, now=NOW), lambda: rerate_preview(db, rules, PERIOD),
                    lambda: void_invoice(db, rules, "GB-2026-000001", "wrong", now=NOW)):
        with pytest.raises(UnknownCreditNote) as refused:
            attempt()
        assert "CN-2026-000009" in str(refused.value) and "'promo'" in str(refused.value)
        assert "\n" not in str(refused.value)
    assert db.query("SELECT count() FROM rollup_runs")[0][0] == generations  # the rated data was not switched
    assert [(h.number, h.status) for h in invoice_store.headers(db, period=PERIOD)] == [("GB-2026-000001", "issued")]
    assert len(credit_notes(db, period=PERIOD)) == 2


def test_the_dry_run_and_the_void_say_each_line_once_in_the_invoice_words_and_what_becomes_of_each_note(tmp_path):
    import os
    import subprocess
    import sys

    from tests.chdb_template import migrated_dsn
    from warehouse.connection import open_database

    dsn = migrated_dsn(tmp_path / "ch")
    with open_database(dsn) as database:
        invoiced_with_goodwill(database, tmp_path, price_error="1.00")
    h800_rules(tmp_path / "cut", cut_from="2026-03-01T00:00:19")
    env = {**os.environ, "GPUBILL_CLICKHOUSE": dsn, "GPUBILL_RULES": str(tmp_path / "cut"), "NO_COLOR": "1",
           "GPUBILL_HOME": str(tmp_path / "var"), "COLUMNS": "200"}

    def gpubill(*args: str) -> list[str]:
        done = subprocess.run([sys.executable, UNLOGGED_CLI, *args], env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        return [line.strip() for line in done.stdout.splitlines() if line.strip()]

    # the invoice's lines in the PDF's words ("H800 GPU rent, on demand (hourly)"), each once, old → new;
    # owed: 13.15 − 5.30 − 1.06 = 6.79 → 1.38
    assert gpubill("rerate", "--period", PERIOD, "--dry-run", "--offline")[1:] == [  # no broker here
        "t01  GB-2026-000001  13.15 → 1.38 CNY with VAT, owed 6.79 → 1.38 (-5.41)",
        "H800 GPU rent, on demand (hourly) at 18.00 CNY/GPU-hour: - → 6.11",
        "H800 GPU rent, on demand (hourly) at 36.00 CNY/GPU-hour: 12.41 → 0.19",
        "Goodwill credit CN-2026-000001: - → -5.00",
        "credit note CN-2026-000001 on GB-2026-000001 (goodwill, 5.30 CNY with VAT): carried as a concession, "
        "5.00 of 5.00 before VAT",
        "credit note CN-2026-000002 on GB-2026-000001 (price_error, 1.06 CNY with VAT): superseded by the "
        "correction (the replacement does not carry it)"]
    voided = gpubill("invoice", "void", "GB-2026-000001", "--reason", "wrong contract")
    assert voided[0].startswith("GB-2026-000001 voided (credit note CN-2026-000003: 6.79 CNY with VAT")
    assert voided[1:] == [
        "credit note CN-2026-000001 on GB-2026-000001 (goodwill, 5.30 CNY with VAT): carried by the replacement "
        "as a concession of 5.00 before VAT (never more than the replacement charges)",
        "credit note CN-2026-000002 on GB-2026-000001 (price_error, 1.06 CNY with VAT): superseded (the "
        "replacement is built from the charges as they are now and does not carry it)"]
