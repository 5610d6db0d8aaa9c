"""The invoice lifecycle on the embedded ClickHouse (issue 24): drafts under manual review,
refreshed by late data and issued after review; credit notes within what is creditable, VAT
reversed on the running total; void and the replacement that names what it replaces, with
the trial credit free again; late usage charged elsewhere is not charged twice by a replacement.

Rows are tests/unit/test_invoice_lock_runs.py's: tenant tNN rents one A800 at ¥1/s for N
seconds of March 2026, so its rent line is ¥N. The trial credit (¥10) goes to registered
tenants only; VAT 6 %. Expected figures are worked out by hand or with Fraction here.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from billing import books

from billing import invoice_store
from billing.balances import balance, top_up
from billing.credit_notes import CreditNoteRefused, create_credit_note, credit_notes, creditable, void_invoice
from billing.invoicing import NothingToIssue, issue_period, pending_adjustments, run_period
from billing.journal import history
from billing.tenants import add_tenant
from billing_rules import load_rules
from tests.rules_copies import manual_review_rules
from tests.unit.test_invoice_lock_runs import NOW, PERIOD, RULES, db, no_margin, seed_tenants  # noqa: F401 (fixtures)

ACTOR = "test:finance"


def fen(x: Fraction) -> Decimal:
    """Half up to the fen, written here independently of billing_rules.round_fen."""
    units = (abs(x) * 100 + Fraction(1, 2)).__floor__()
    return Decimal(units if x >= 0 else -units) / 100


def manual_rules(tmp_path: Path):
    """The e2e rules with `review = "manual"` in billing.toml."""
    rules = load_rules(manual_review_rules(tmp_path / "rules"))
    assert rules.review == "manual" and RULES.review == "auto"
    return rules


def test_manual_review_drafts_refresh_issue_credit_void_and_replace(db, tmp_path):
    rules = manual_rules(tmp_path)
    seed_tenants(db, {"t01": 7, "t02": 30})
    add_tenant(db, "t02", "Tenant Two")  # registered: the ¥10 trial credit
    top_up(db, "t02", "100", "pay-1")

    # -- 1. a run makes drafts only: ids, no numbers
    report = run_period(db, rules, PERIOD, now=NOW, actor=ACTOR)
    assert report.created == [] and len(report.drafted) == 2
    drafts = invoice_store.headers(db, period=PERIOD)
    assert [(h.tenant, h.status, h.number, h.revision) for h in drafts] == [
        ("t01", "draft", "", 1), ("t02", "draft", "", 1)]
    assert all(h.id.startswith("DRAFT-") for h in drafts)
    # each records the rule set that priced it: 12 hex digits of the rule files' sha256
    assert {h.rules_revision for h in drafts} == {rules.revision} and len(rules.revision) == 12
    assert rules.revision != RULES.revision  # `review = "manual"` is an edit of billing.toml
    # t02: 30 s × ¥1 = 30.00 − 10.00 trial = 20.00 net; VAT 1.20; total 21.20
    assert [(h.tenant, h.total) for h in drafts] == [("t01", Decimal("7.42")), ("t02", Decimal("21.20"))]
    assert balance(db, rules, "t02", now=NOW).invoiced == Decimal("0.00")  # a draft charges nothing
    with pytest.raises(CreditNoteRefused, match="is a draft"):  # nor can it be credited or voided
        create_credit_note(db, rules, drafts[1].id, "goodwill", {1: Decimal("1.00")}, actor=ACTOR)
    with pytest.raises(CreditNoteRefused, match="is a draft"):
        void_invoice(db, rules, drafts[1].id, "no", actor=ACTOR)

    # -- 2. late data for t01 (12 s instead of 7): its draft is refreshed, t02's is left as it was
    seed_tenants(db, {"t01": 12})
    report = run_period(db, rules, PERIOD, now=NOW, actor=ACTOR)
    assert (report.refreshed, report.unchanged) == ([drafts[0].id], [drafts[1].id])
    t01 = invoice_store.current(db, "t01", PERIOD)
    assert (t01.id, t01.status, t01.revision, t01.total) == (drafts[0].id, "draft", 2, Decimal("12.72"))  # 12 × 1.06
    assert invoice_store.delete_stray_lines(db) == [(drafts[0].id, 1, "t01", PERIOD)]  # revision 1's lines: stale

    # -- 3. issue: numbered in tenant order, gap-free; issuing again finds nothing
    issued = issue_period(db, rules, PERIOD, now=NOW, actor=ACTOR)
    assert issued == [(drafts[0].id, "GB-2026-000001"), (drafts[1].id, "GB-2026-000002")]
    with pytest.raises(NothingToIssue, match="no drafts to issue for 2026-03"):
        issue_period(db, rules, PERIOD, now=NOW, actor=ACTOR)
    t02 = invoice_store.find(db, "GB-2026-000002")
    assert (t02.status, t02.id, t02.revision) == ("issued", drafts[1].id, 1)  # the reviewed lines, unchanged
    assert [(line.kind, line.amount) for line in t02.lines] == [("rent", Decimal("30.00")), ("credit", Decimal("-10.00"))]
    assert balance(db, rules, "t02", now=NOW).invoiced == Decimal("21.20")

    # -- 4. partial credit notes; VAT on the running total: 0.05 → round(0.003) = 0.00, then
    #   0.10 → round(0.006) = 0.01, so the second reverses 0.01 (each rounded alone: 0.00 + 0.00)
    first = create_credit_note(db, rules, "GB-2026-000002", "goodwill", {1: Decimal("0.05")}, actor=ACTOR, now=NOW)
    second = create_credit_note(db, rules, "GB-2026-000002", "price_error", {1: Decimal("0.05")}, note="rate typo",
                                actor=ACTOR, now=NOW)
    rate = Fraction(6, 100)
    assert (first.subtotal, first.tax) == (Decimal("0.05"), fen(Fraction(5, 100) * rate)) == (Decimal("0.05"), 0)
    assert second.tax == fen(Fraction(10, 100) * rate) - first.tax == Decimal("0.01")
    assert (first.number, second.number) == ("CN-2026-000001", "CN-2026-000002")
    assert (second.reason, second.note, second.actor) == ("price_error", "rate typo", ACTOR)
    left = creditable(db, t02)
    assert (left.lines, left.net) == ({1: Decimal("29.90")}, Decimal("19.90"))
    # the balance counts them: 100 − 21.20 + 0.05 + 0.06 = 78.91 (no usage in the period of NOW)
    assert balance(db, rules, "t02", now=NOW).balance == Decimal("100") - Decimal("21.20") + Decimal("0.11")

    # -- refused, nothing written: over the total (19.90 left of the net), over a line, a credit
    #   line, a line it lacks, an unknown reason, a draft's id
    refusals = [
        (dict(lines={1: Decimal("19.91")}), "at most 19.90 more before tax"),
        (dict(lines={2: Decimal("1.00")}), "line 2 of GB-2026-000002 is a credit line"),
        (dict(lines={3: Decimal("1.00")}), "has no line 3"),
        (dict(lines={1: Decimal("0.001")}), "in whole fen"),
        (dict(lines={}), "say what to credit"),
        (dict(reason="oops"), "reason 'oops' is not one of"),
        (dict(number="DRAFT-000000000000"), "no invoice"),
    ]
    for change, message in refusals:
        args = {"number": "GB-2026-000002", "reason": "goodwill", "lines": {1: Decimal("1.00")}} | change
        with pytest.raises(CreditNoteRefused, match=message):
            create_credit_note(db, rules, args["number"], args["reason"], args["lines"], actor=ACTOR, now=NOW)
    assert [n.number for n in credit_notes(db)] == ["CN-2026-000001", "CN-2026-000002"]

    # -- 5. void: a credit note for what is left — the rent's 29.90, the trial given back (−10.00):
    #   19.90; VAT round(20.00 × 6 %) − 0.01 = 1.19 — then the invoice is voided
    voided, note = void_invoice(db, rules, "GB-2026-000002", "billed to the wrong contract", actor=ACTOR, now=NOW)
    assert voided.status == "voided" and note.number == "CN-2026-000003" and note.reason == "void"
    assert voided.rules_revision == rules.revision  # a void keeps what priced it
    assert [(ln.invoice_line_no, ln.kind, ln.amount) for ln in note.lines] == [
        (1, "rent", Decimal("29.90")), (2, "credit", Decimal("-10.00"))]
    assert (note.subtotal, note.tax) == (Decimal("19.90"), fen(20 * rate) - Decimal("0.01"))
    assert sum(n.total for n in credit_notes(db, invoice="GB-2026-000002")) == t02.total  # all of it, to the fen
    for again in (lambda: void_invoice(db, rules, "GB-2026-000002", "again", actor=ACTOR),
                  lambda: create_credit_note(db, rules, "GB-2026-000002", "goodwill", {1: Decimal("1")}, actor=ACTOR)):
        with pytest.raises(CreditNoteRefused, match="already voided"):
            again()
    # voided and fully credited, the period charges nothing until the replacement; its estimate
    # (the replacement as it would be: the trial free again, the goodwill CN-2026-000001 carried
    # as a concession, the price_error superseded: 30.00 − 0.05 − 10.00 = 19.95 net,
    # VAT round(1.197) = 1.20, 21.15) stands in for it meanwhile
    after_void = balance(db, rules, "t02", now=NOW)
    assert after_void.invoiced == Decimal("0.00") and [(e.period, e.total) for e in after_void.estimates] == [
        (PERIOD, Decimal("21.15")), ("2026-04", Decimal("0.00"))]

    # -- 6. the next run drafts a replacement that names the voided one; issued, it is GB-2026-000003
    report = run_period(db, rules, PERIOD, now=NOW, actor=ACTOR)
    assert len(report.drafted) == 1 and report.existing == ["GB-2026-000001"]
    assert issue_period(db, rules, PERIOD, tenant="t02", now=NOW, actor=ACTOR)[0][1] == "GB-2026-000003"
    replacement = invoice_store.current(db, "t02", PERIOD)
    assert (replacement.number, replacement.replaces, replacement.total) == ("GB-2026-000003", "GB-2026-000002",
                                                                             Decimal("21.15"))
    assert [(line.kind, line.credit_id, line.amount) for line in replacement.lines if line.kind != "rent"] == [
        ("concession", "CN-2026-000001", Decimal("-0.05")),  # the goodwill, carried (issue 36)
        ("credit", "trial", Decimal("-10.00"))]  # the trial the voided invoice used, spent again
    assert balance(db, rules, "t02", now=NOW).invoiced == Decimal("21.15")
    assert [(h.number, h.status) for h in invoice_store.headers(db, tenant="t02")] == [
        ("GB-2026-000002", "voided"), ("GB-2026-000003", "issued")]

    # -- 7. the journal tells the whole story of GB-2026-000002
    entries = history(db, [drafts[1].id, "GB-2026-000002"])
    assert [(e.action, e.document) for e in entries] == [
        ("draft_made", ""), ("issued", drafts[1].id), ("credit_note", "CN-2026-000001"),
        ("credit_note", "CN-2026-000002"), ("credit_note", "CN-2026-000003"), ("voided", "CN-2026-000003"),
        ("draft_made", "GB-2026-000002"),  # the replacement's draft, naming what it replaces
        ("replaced", "GB-2026-000003")]
    assert {e.actor for e in entries} == {ACTOR}
    assert entries[5].reason == "billed to the wrong contract"


def test_a_replacement_does_not_charge_again_what_a_later_invoice_adjusted(db):
    # auto review. March: t01 7 s → GB-2026-000001 7.00 (unregistered: no trial)
    seed_tenants(db, {"t01": 7})
    assert run_period(db, RULES, PERIOD, now=NOW).created == ["GB-2026-000001"]
    # late March data (12 s) and 3 s of April: April's invoice adjusts March by +5.00
    seed_tenants(db, {"t01": 12})
    seed_tenants(db, {"t01": 3}, period="2026-04")
    assert run_period(db, RULES, "2026-04", now=datetime(2026, 5, 10, tzinfo=UTC)).created == ["GB-2026-000002"]
    april = invoice_store.find(db, "GB-2026-000002")
    assert [(line.kind, line.ref_period, line.amount) for line in april.lines] == [
        ("rent", None, Decimal("3.00")), ("adjustment", "2026-03", Decimal("5.00"))]
    # void March; its replacement is built from March as it is now (12.00) less the 5.00 April charged
    void_invoice(db, RULES, "GB-2026-000001", "wrong plan", actor=ACTOR)
    assert run_period(db, RULES, PERIOD, now=NOW).created == ["GB-2026-000003"]
    replacement = invoice_store.find(db, "GB-2026-000003")
    assert [(line.kind, line.amount) for line in replacement.lines] == [
        ("rent", Decimal("12.00")), ("adjustment", Decimal("-5.00"))]
    assert "already charged on GB-2026-000002" in replacement.lines[1].description
    assert (replacement.subtotal, replacement.total) == (Decimal("7.00"), Decimal("7.42"))
    # and a later period finds nothing more to adjust for March: 12.00 billed (12.00 + 5.00 − 5.00)
    assert pending_adjustments(db, RULES, "t01", "2026-05", ["2026-03"]) == []
    # its negative adjustment is not creditable alone; a void gives it back with the rest:
    #   12.00 − 5.00 = 7.00, VAT 0.42
    with pytest.raises(CreditNoteRefused, match="line 2 of GB-2026-000003 is a negative adjustment"):
        create_credit_note(db, RULES, "GB-2026-000003", "goodwill", {2: Decimal("1.00")}, actor=ACTOR)
    _, note = void_invoice(db, RULES, "GB-2026-000003", "still wrong", actor=ACTOR)
    assert [(ln.invoice_line_no, ln.amount) for ln in note.lines] == [(1, Decimal("12.00")), (2, Decimal("-5.00"))]
    assert (note.subtotal, note.tax, note.total) == (Decimal("7.00"), Decimal("0.42"), Decimal("7.42"))


def test_two_credit_notes_at_once_never_credit_more_than_the_invoice(db):
    seed_tenants(db, {"t01": 30})
    run_period(db, RULES, PERIOD, now=NOW)  # GB-2026-000001: 30.00 net
    outcomes: list[object] = []

    def credit() -> None:  # a thread starts with no books open: each opens its own, as a command does
        try:
            with books.using(books.UnloggedBooks()):
                outcomes.append(create_credit_note(db, RULES, "GB-2026-000001", "duplicate", {1: Decimal("20.00")},
                                                   actor=ACTOR).number)
        except CreditNoteRefused as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=credit) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    numbers = [o for o in outcomes if str(o).startswith("CN-")]
    assert numbers == ["CN-2026-000001"], outcomes  # the other found only 10.00 left
    assert any("at most 10.00 more" in str(o) for o in outcomes)


def test_the_billing_job_tells_the_gauge_how_many_drafts_wait_for_review(db, tmp_path):
    from prometheus_client import CollectorRegistry

    from billing.scheduler import _billing_job
    from streams.metrics import Metrics

    rules = manual_rules(tmp_path)
    seed_tenants(db, {"t01": 7, "t02": 30})
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    # April 10: March is closed and past its grace (3 days): the job drafts it
    reports = _billing_job(db, rules, metrics.invoice_drafts.set, now=NOW)
    assert [len(r.drafted) for r in reports] == [2]
    assert registry.get_sample_value("gpubill_invoice_drafts_waiting") == 2  # two drafts wait
    issue_period(db, rules, PERIOD, tenant="t01", now=NOW, actor=ACTOR)
    _billing_job(db, rules, metrics.invoice_drafts.set, now=NOW)  # March has run: nothing new, one left
    assert registry.get_sample_value("gpubill_invoice_drafts_waiting") == 1
