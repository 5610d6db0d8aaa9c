"""Payments, allocations, reversals, credit applied and write-offs (billing/payments.py, issue 38) on the
embedded ClickHouse, through UnloggedBooks.

The books (tests/unit/test_invoice_lock_runs.py's rows: tenant tNN rents one A800 at ¥1/s; the
e2e rules: VAT 6 %, payment terms 15 days, a ¥10 trial credit once per registered tenant):

    GB-2026-000001  t01 2026-02  110 s: rent 110.00 − trial 10.00 = 100.00 net, VAT 6.00 → 106.00
                    issued 2026-03-05, due 2026-03-20
    GB-2026-000002  t01 2026-03  200 s: rent 200.00 (trial spent) net, VAT 12.00        → 212.00
    GB-2026-000003  t02 2026-03   60 s: rent  60.00 − trial 10.00 = 50.00 net, VAT 3.00 →  53.00
                    both issued 2026-04-05, due 2026-04-20

Payments are recorded at NOW (2026-04-10, Shanghai) unless a test says otherwise. Every figure
expected is worked out by hand in a comment, never by the code under test.
"""

from __future__ import annotations

import shutil
from datetime import UTC, date, datetime
from decimal import Decimal as D
from pathlib import Path

import pytest

from billing import invoice_store
from billing.accounts import FAR, ledger
from billing.credit_notes import create_credit_note, credit_notes, void_invoice
from billing.errors import BillingError
from billing.invoicing import run_period
from billing.payments import (
    PaymentRefused, apply_credit, find_payment, payments, receipt, record_payment, record_payments, reverse_payment,
    write_off,
)
from billing.tenants import add_tenant
from billing_rules import load_rules
from tests.chdb_template import migrated_dsn
from tests.rules_copies import manual_review_rules
from tests.unit.test_invoice_lock_runs import RULES, seed_tenants
from tests.unit.test_tenants import assert_one_printable_line
from warehouse import writes
from warehouse.connection import open_database

NOW = datetime(2026, 4, 10, tzinfo=UTC)  # 08:00 on 2026-04-10 in Shanghai
FEB_RUN = datetime(2026, 3, 5, tzinfo=UTC)
MARCH_RUN = datetime(2026, 4, 5, tzinfo=UTC)
GB1, GB2, GB3 = "GB-2026-000001", "GB-2026-000002", "GB-2026-000003"
MONEY_TABLES = ("payments", "payment_reversals", "allocations", "write_offs", "refunds", "credit_notes", "invoices")


def _seed(path: Path, *, march: bool) -> None:
    with pytest.MonkeyPatch.context() as patch, open_database(migrated_dsn(path)) as db:
        patch.setattr(writes, "MARGIN_S", 0)
        for tenant in ("t01", "t02"):
            add_tenant(db, tenant, tenant.upper(), now=datetime(2026, 1, 1, tzinfo=UTC))
        seed_tenants(db, {"t01": 110}, "2026-02")
        run_period(db, RULES, "2026-02", now=FEB_RUN)
        seed_tenants(db, {"t01": 200, "t02": 60}, "2026-03")
        if march:
            run_period(db, RULES, "2026-03", now=MARCH_RUN)


@pytest.fixture(scope="module")
def templates(tmp_path_factory) -> dict[str, Path]:
    """Two seeded databases, made once: `feb` (GB-2026-000001 issued, March's usage not yet invoiced)
    and `both` (all three invoices issued)."""
    root = tmp_path_factory.mktemp("payments")
    _seed(root / "feb", march=False)
    _seed(root / "both", march=True)
    return {"feb": root / "feb", "both": root / "both"}


def _open(templates: dict[str, Path], which: str, tmp_path: Path):
    shutil.copytree(templates[which], tmp_path / "ch", symlinks=True)
    return open_database(f"chdb://{tmp_path / 'ch'}")


@pytest.fixture
def db(templates, tmp_path, monkeypatch):
    monkeypatch.setattr(writes, "MARGIN_S", 0)
    with _open(templates, "both", tmp_path) as database:
        yield database


@pytest.fixture
def feb(templates, tmp_path, monkeypatch):
    monkeypatch.setattr(writes, "MARGIN_S", 0)
    with _open(templates, "feb", tmp_path) as database:
        yield database


def pay(db, tenant: str, amount: str, ref: str, received: str = "2026-04-06", **options):
    return record_payment(db, RULES, tenant, amount, ref, received, now=options.pop("now", NOW), **options)


def states(db, as_of: date = FAR) -> dict[str, tuple[D, D, D, D, str]]:
    """Each invoice as (paid, credited, written off, outstanding, payment state)."""
    return {n: (s.paid, s.credited, s.written_off, s.outstanding, s.payment_state)
            for n, s in ledger(db, RULES).states(as_of).items()}


def held(db, tenant: str) -> D:
    return ledger(db, RULES, tenant).unapplied(FAR).get(tenant, D("0.00"))


def stored(db) -> dict[str, int]:
    """Rows of every table money is written to, as stored (no FINAL: a row written twice shows twice)."""
    return {table: db.query(f"SELECT count() FROM {table}")[0][0] for table in MONEY_TABLES}


def test_the_seeded_books_are_as_the_docstring_says(db):
    assert [(h.number, h.tenant, h.period, h.total) for h in invoice_store.headers(db, status="issued")] == [
        (GB1, "t01", "2026-02", D("106.00")), (GB2, "t01", "2026-03", D("212.00")), (GB3, "t02", "2026-03", D("53.00"))]
    docs = {d.number: (d.issued_on, d.due_on) for d in ledger(db, RULES).invoices}
    assert docs == {GB1: (date(2026, 3, 5), date(2026, 3, 20)), GB2: (date(2026, 4, 5), date(2026, 4, 20)),
                    GB3: (date(2026, 4, 5), date(2026, 4, 20))}


# ----------------------------------------------------------------------------------- allocation


def test_a_payment_goes_to_the_oldest_due_invoice_first_then_the_next(db):
    payment, created = pay(db, "t01", "150", "pay-1")
    # 150.00: GB1 (due 03-20) takes all it asks, 106.00; GB2 (due 04-20) the other 44.00; nothing held
    assert created and payment.allocations == ((GB1, D("106.00")), (GB2, D("44.00"))) and payment.unapplied == 0
    assert states(db) == {GB1: (D("106.00"), 0, 0, D("0.00"), "paid"),
                          GB2: (D("44.00"), 0, 0, D("168.00"), "partially_paid"),  # 212.00 − 44.00
                          GB3: (0, 0, 0, D("53.00"), "unpaid")}  # t02's: never touched by t01's money
    assert (payment.tenant, payment.method, payment.source, payment.received_on) == (
        "t01", "bank", "manual", date(2026, 4, 6))


def test_a_partial_payment_leaves_the_rest_outstanding(db):
    payment, _ = pay(db, "t01", "50", "pay-1")
    # 50.00 of GB1's 106.00: 56.00 left; partially paid. As of 04-06 GB1 is 17 days past its due date: overdue
    assert payment.allocations == ((GB1, D("50.00")),)
    assert states(db)[GB1] == (D("50.00"), 0, 0, D("56.00"), "partially_paid")
    as_of = ledger(db, RULES).states(date(2026, 4, 6))[GB1]
    assert (as_of.days_past_due, as_of.overdue) == (17, True)
    # and as of the day before it was received, it had not been paid at all (no later receipt subtracted)
    assert ledger(db, RULES).states(date(2026, 4, 5))[GB1].paid == 0


def test_an_overpayment_is_held_as_unapplied_credit(db):
    payment, _ = pay(db, "t01", "400", "pay-1")
    # 400.00 − 106.00 (GB1) − 212.00 (GB2) = 82.00 held
    assert payment.allocations == ((GB1, D("106.00")), (GB2, D("212.00")))
    assert payment.unapplied == held(db, "t01") == D("82.00")
    assert states(db)[GB2] == (D("212.00"), 0, 0, D("0.00"), "paid")


def test_named_invoices_are_paid_first_and_the_rest_is_credit_not_another_invoice(db):
    payment, _ = pay(db, "t01", "150", "pay-1", invoices=[(GB2, None)])
    # GB2 named: it takes all 150.00 (it asks 212.00); GB1, older, is not touched
    assert payment.allocations == ((GB2, D("150.00")),) and payment.unapplied == 0
    assert states(db)[GB1][3] == D("106.00") and states(db)[GB2][3] == D("62.00")  # 212.00 − 150.00
    more, _ = pay(db, "t01", "100", "pay-2", invoices=[(GB2, None)])
    # GB2 asks 62.00 more: the other 38.00 is held, not spent on GB1 (it was not named)
    assert more.allocations == ((GB2, D("62.00")),) and more.unapplied == D("38.00")
    assert states(db)[GB1][3] == D("106.00")


def test_an_invoice_named_with_an_amount_takes_exactly_that(db):
    payment, _ = pay(db, "t01", "120", "pay-1", invoices=[(GB2, D("50.00")), (GB1, None)])
    # GB2=50.00 exactly; GB1 then takes what is left of 120.00: 70.00 (of its 106.00)
    assert payment.allocations == ((GB1, D("70.00")), (GB2, D("50.00")))  # listed by invoice
    assert states(db)[GB1][3] == D("36.00") and states(db)[GB2][3] == D("162.00")


def test_several_payments_in_one_call_allocate_each_after_the_ones_before(db):
    done = record_payments(db, RULES, [
        receipt(db, RULES, "t01", "100", "pay-1", "2026-04-06", now=NOW),
        receipt(db, RULES, "t02", "20", "pay-2", "2026-04-06", now=NOW),
        receipt(db, RULES, "t01", "100", "pay-3", "2026-04-07", now=NOW)], now=NOW)
    # pay-1: GB1 100.00 (6.00 left); pay-3 sees it: GB1 6.00, GB2 94.00; t02's pay-2: GB3 20.00
    assert [(p.ref, p.allocations, made) for p, made in done] == [
        ("pay-1", ((GB1, D("100.00")),), True), ("pay-2", ((GB3, D("20.00")),), True),
        ("pay-3", ((GB1, D("6.00")), (GB2, D("94.00"))), True)]
    assert states(db)[GB2][3] == D("118.00")  # 212.00 − 94.00
    # again: each is recorded already, the same: nothing changes
    before = stored(db)
    again = record_payments(db, RULES, [receipt(db, RULES, "t01", "100", "pay-1", "2026-04-06", now=NOW)], now=NOW)
    assert [(p.ref, made) for p, made in again] == [("pay-1", False)] and stored(db) == before


def test_one_refused_payment_of_several_and_none_is_written(db):
    pay(db, "t01", "10", "pay-1")
    before = stored(db)
    for asked in ([receipt(db, RULES, "t01", "20", "pay-2", "2026-04-06", now=NOW),
                   receipt(db, RULES, "t01", "11", "pay-1", "2026-04-06", now=NOW)],  # pay-1 was 10.00
                  [receipt(db, RULES, "t01", "20", "pay-2", "2026-04-06", now=NOW),
                   receipt(db, RULES, "t01", "20", "pay-2", "2026-04-06", now=NOW)]):  # a ref twice
        with pytest.raises(PaymentRefused) as refused:
            record_payments(db, RULES, asked, now=NOW)
        assert "nothing was written" in str(refused.value)
        assert_one_printable_line(str(refused.value))
    assert stored(db) == before and [p.ref for p in payments(db)] == ["pay-1"]


# ------------------------------------------------------------------------------ credit, spent later


def test_credit_held_is_spent_by_the_next_issued_invoice(feb):
    payment, _ = pay(feb, "t01", "300", "pay-1", received="2026-03-12", now=datetime(2026, 3, 12, tzinfo=UTC))
    # 300.00: GB1 106.00, 194.00 held until March is invoiced
    assert payment.allocations == ((GB1, D("106.00")),) and held(feb, "t01") == D("194.00")
    run_period(feb, RULES, "2026-03", now=MARCH_RUN)
    # GB2 (212.00) is issued and spends the 194.00 at once: 18.00 outstanding; t02's GB3 has no credit
    assert states(feb)[GB2] == (D("194.00"), 0, 0, D("18.00"), "partially_paid")
    assert states(feb)[GB3] == (0, 0, 0, D("53.00"), "unpaid")
    spent = find_payment(feb, "pay-1")
    assert spent.allocations == ((GB1, D("106.00")), (GB2, D("194.00"))) and spent.unapplied == 0
    assert held(feb, "t01") == 0
    # counted from the issue date (04-05), not the receipt's: as of 04-04 GB2 did not exist, the credit was held
    assert ledger(feb, RULES).unapplied(date(2026, 4, 4)) == {"t01": D("194.00")}
    # reversing the payment undoes what the invoice run took of it too: GB1 and GB2 ask everything again
    reverse_payment(feb, RULES, "pay-1", "bounced", now=NOW)
    assert states(feb)[GB1][3] == D("106.00") and states(feb)[GB2][3] == D("212.00") and held(feb, "t01") == 0


def test_apply_spends_credit_from_a_credit_note_on_what_is_outstanding(db):
    pay(db, "t01", "106", "pay-1", invoices=[(GB1, None)])
    note = create_credit_note(db, RULES, GB1, "goodwill", {1: D("10.00")}, now=NOW)
    # 10.00 + VAT 0.60 = 10.60; GB1 was paid: all of it is held as credit
    assert note.total == D("10.60") and held(db, "t01") == D("10.60")
    assert apply_credit(db, RULES, "t01", now=NOW) == [(GB2, D("10.60"))]
    # 212.00 − 10.60 = 201.40 asked; credit from a note is not a payment: unpaid
    assert states(db)[GB2] == (0, D("10.60"), 0, D("201.40"), "unpaid")
    assert held(db, "t01") == 0 and apply_credit(db, RULES, "t01", now=NOW) == []  # none left: nothing happens
    with pytest.raises(PaymentRefused, match="GB-2026-000003 is not an issued invoice of t01"):
        apply_credit(db, RULES, "t01", invoices=[GB3], now=NOW)


# ---------------------------------------------------------------------------------------- reversal


def test_a_reversal_undoes_every_allocation_and_is_itself_refused_twice(db):
    pay(db, "t01", "150", "pay-1")
    before = states(db)
    reversed_ = reverse_payment(db, RULES, "pay-1", "bounced", now=NOW)
    # its 106.00 on GB1 and 44.00 on GB2 are undone by negative allocations dated 04-10
    assert (reversed_.reversed_on, reversed_.reversal_reason, reversed_.allocations) == (date(2026, 4, 10), "bounced", ())
    assert states(db)[GB1] == (0, 0, 0, D("106.00"), "unpaid") and states(db)[GB2][3] == D("212.00")
    assert reversed_.unapplied == 0 and held(db, "t01") == 0
    # as of the day before the reversal it was paid: the past is not rewritten
    assert states(db, date(2026, 4, 9))[GB1] == before[GB1]
    rows = stored(db)
    for ref, message in (("pay-1", "already reversed on 2026-04-10"), ("pay-9", "no payment pay-9")):
        with pytest.raises(PaymentRefused, match=message):
            reverse_payment(db, RULES, ref, "again", now=NOW)
    with pytest.raises(PaymentRefused, match="--reason is required"):
        reverse_payment(db, RULES, "pay-1", "  ", now=NOW)
    assert stored(db) == rows


# --------------------------------------------------------------------------------------- write-off


def test_a_write_off_then_a_later_payment_recovers_it(db):
    pay(db, "t01", "6", "pay-1")
    assert write_off(db, RULES, GB1, "customer gone", now=NOW) == D("100.00")  # 106.00 − 6.00
    # nothing outstanding; still partially paid (a write-off does not pay)
    assert states(db)[GB1] == (D("6.00"), 0, D("100.00"), D("0.00"), "partially_paid")
    # an unnamed payment does not reopen it: GB2 is the oldest with something outstanding
    unnamed, _ = pay(db, "t01", "12", "pay-2")
    assert unnamed.allocations == ((GB2, D("12.00")),)
    # named, a payment reaches what was written off: 40.00 recovers 40.00 of the 100.00
    named, _ = pay(db, "t01", "40", "pay-3", invoices=[(GB1, None)])
    assert named.allocations == ((GB1, D("40.00")),)
    assert states(db)[GB1] == (D("46.00"), 0, D("60.00"), D("0.00"), "partially_paid")  # 6 + 40 paid; 100 − 40
    # reversing it writes the 40.00 off again
    reverse_payment(db, RULES, "pay-3", "bounced", now=NOW)
    assert states(db)[GB1] == (D("6.00"), 0, D("100.00"), D("0.00"), "partially_paid")
    # a payment of all the rest: 100.00 named recovers it all, and the invoice is paid
    pay(db, "t01", "100", "pay-4", invoices=[(GB1, None)])
    assert states(db)[GB1] == (D("106.00"), 0, D("0.00"), D("0.00"), "paid")
    rows = stored(db)
    with pytest.raises(PaymentRefused, match="GB-2026-000001 has nothing outstanding to write off"):
        write_off(db, RULES, GB1, "again", now=NOW)
    with pytest.raises(PaymentRefused, match="--reason is required"):
        write_off(db, RULES, GB2, "", now=NOW)
    with pytest.raises(PaymentRefused, match="no invoice 'GB-2026-000009'"):
        write_off(db, RULES, "GB-2026-000009", "gone", now=NOW)
    assert stored(db) == rows


# ------------------------------------------------------------------------- credit notes after payment


def test_a_credit_note_on_a_paid_invoice_is_held_as_credit_or_with_a_refund_paid_back_never_both(db):
    pay(db, "t01", "106", "pay-1", invoices=[(GB1, None)])
    pay(db, "t02", "53", "pay-2")
    held_note = create_credit_note(db, RULES, GB1, "goodwill", {1: D("10.00")}, now=NOW)
    refunded = create_credit_note(db, RULES, GB3, "goodwill", {1: D("10.00")}, now=NOW, refund="rf-1")
    books = ledger(db, RULES)
    # both invoices were paid: nothing goes to them; 10.60 (10.00 + VAT 0.60) each beyond
    assert [a for a in books.allocations if a.source_kind == "credit_note"] == []
    assert (held_note.total, refunded.total) == (D("10.60"), D("10.60"))
    assert held(db, "t01") == D("10.60")  # held as t01's credit
    assert [(r.ref, r.tenant, r.credit_note, r.amount) for r in books.refunds] == [
        ("rf-1", "t02", refunded.number, D("10.60"))]
    assert held(db, "t02") == 0  # refunded, so not held as well


def test_a_credit_note_first_reduces_what_the_invoice_still_asks(db):
    pay(db, "t01", "100", "pay-1", invoices=[(GB1, None)])
    note = create_credit_note(db, RULES, GB1, "goodwill", {1: D("10.00")}, now=NOW, refund="rf-1")
    # GB1 asked 6.00 more: 6.00 of the 10.60 go to it, the other 4.60 are refunded; paid + credited = 106.00
    assert states(db)[GB1] == (D("100.00"), D("6.00"), 0, D("0.00"), "paid")
    assert [(r.ref, r.amount) for r in ledger(db, RULES).refunds] == [("rf-1", D("4.60"))]
    assert held(db, "t01") == 0 and note.total == D("10.60")


def test_a_refund_with_nothing_beyond_the_invoice_or_a_reused_ref_is_refused(db):
    create_credit_note(db, RULES, GB2, "goodwill", {1: D("10.00")}, now=NOW, refund=None)
    pay(db, "t02", "53", "pay-2")
    create_credit_note(db, RULES, GB3, "goodwill", {1: D("1.00")}, now=NOW, refund="rf-1")
    rows = stored(db)
    # GB2 asks 201.40: all of a note's 10.60 goes to it, nothing is left to refund
    with pytest.raises(PaymentRefused, match="nothing to refund"):
        create_credit_note(db, RULES, GB2, "goodwill", {1: D("10.00")}, now=NOW, refund="rf-2")
    with pytest.raises(PaymentRefused, match="refund ref rf-1 is already recorded"):
        create_credit_note(db, RULES, GB3, "goodwill", {1: D("1.00")}, now=NOW, refund="rf-1")
    assert stored(db) == rows and len(credit_notes(db)) == 2


# ------------------------------------------------------------------------------------- idempotency


def test_the_same_payment_again_changes_nothing_and_its_ref_with_other_content_is_refused(db):
    first, created = pay(db, "t01", "150", "pay-1", note="wire 88")
    again, created_again = pay(db, "t01", "150.00", "pay-1", note="re-run")  # the note is not compared
    assert (created, created_again) == (True, False) and again == first
    rows = stored(db)
    for change in (dict(amount="150.01"), dict(tenant="t02"), dict(received="2026-04-07"), dict(method="alipay")):
        args = dict(tenant="t01", amount="150", received="2026-04-06") | change
        with pytest.raises(PaymentRefused) as refused:
            pay(db, args.pop("tenant"), args.pop("amount"), "pay-1", args.pop("received"), **args)
        assert "ref pay-1 is already recorded as 150.00 CNY from t01 received 2026-04-06 by bank" in str(refused.value)
        assert_one_printable_line(str(refused.value))
    assert stored(db) == rows


# --------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("change, fragment", [
    (dict(amount="0"), "must be above zero"),
    (dict(amount="0.00"), "must be above zero"),
    (dict(amount="-5"), "is not an amount"),
    (dict(amount="NaN"), "is not an amount"),
    (dict(amount=D("NaN")), "is not a number"),
    (dict(amount="1.001"), "is not an amount"),
    (dict(amount="1e9"), "is not an amount"),
    (dict(amount="100000000.01"), "above the cap of 100000000.00"),
    (dict(amount="999999999999"), "above the cap"),
    (dict(tenant="t09"), "tenant t09 is not registered"),
    (dict(tenant="bad id"), "tenant id 'bad id' is not an id"),
    (dict(ref="bad ref"), "is not an id"),
    (dict(ref="pay\x1b[31m"), "is not an id"),
    (dict(received="2026-04-11"), "is after today (2026-04-10 in Asia/Shanghai)"),
    (dict(received="2026-02-30"), "is not a date of the calendar"),
    (dict(received="10/04/2026"), "is not a date YYYY-MM-DD"),
    (dict(received="1999-12-31"), "before 2000"),
    (dict(method="cash"), "--method 'cash' is not one of bank, alipay, wechat, card, other"),
    (dict(note="x" * 501), "at most 500"),
    (dict(note="a\x1b[2Jb"), "control"),
    # pay-0 (below) took 1.00 of GB1's 106.00: it asks 105.00 more
    (dict(invoices=[(GB1, D("105.01"))]), "GB-2026-000001 asks 105.00 more, the payment gives it 105.01"),
    (dict(amount="100", invoices=[(GB1, D("60")), (GB2, D("60"))]), "add up to more than the payment (100.00)"),
    (dict(invoices=[(GB3, None)]), "GB-2026-000003 is not an issued invoice of t01"),
    (dict(invoices=[("GB-2026-000099", None)]), "GB-2026-000099 is not an issued invoice of t01"),
    (dict(invoices=[(GB1, None), (GB1, None)]), "--invoice GB-2026-000001 is named twice"),
])
def test_bad_input_is_refused_in_one_line_and_nothing_is_written(db, change, fragment):
    pay(db, "t01", "1", "pay-0")
    rows = stored(db)
    args = dict(tenant="t01", amount="200", ref="pay-1", received="2026-04-06") | change
    with pytest.raises(BillingError) as refused:
        pay(db, args.pop("tenant"), args.pop("amount"), args.pop("ref"), args.pop("received"), **args)
    assert fragment in str(refused.value)
    assert_one_printable_line(str(refused.value))
    assert stored(db) == rows


def test_a_payment_to_a_voided_invoice_or_a_draft_is_refused(db, tmp_path):
    void_invoice(db, RULES, GB3, "wrong contract", now=NOW)
    seed_tenants(db, {"t02": 30}, "2026-04")
    manual = load_rules(manual_review_rules(tmp_path / "rules"))
    run_period(db, manual, "2026-04", now=datetime(2026, 5, 5, tzinfo=UTC))
    (draft,) = invoice_store.headers(db, status="draft")
    rows = stored(db)
    with pytest.raises(PaymentRefused, match="GB-2026-000003 is voided: a payment goes to an issued invoice"):
        pay(db, "t02", "10", "pay-1", invoices=[(GB3, None)])
    with pytest.raises(PaymentRefused, match=f"{draft.id} is not an issued invoice of t02"):
        pay(db, "t02", "10", "pay-1", invoices=[(draft.id, None)])
    with pytest.raises(PaymentRefused, match="GB-2026-000003 is voided: only an issued invoice is written off"):
        write_off(db, RULES, GB3, "gone", now=NOW)
    assert stored(db) == rows
    # unnamed, a payment passes the voided invoice by: t02 has nothing outstanding, all of it is held
    payment, _ = pay(db, "t02", "10", "pay-1")
    assert payment.allocations == () and payment.unapplied == D("10.00")


def test_verify_log_states_what_was_allocated_to_and_written_off_the_periods_invoices(db):
    """verify-log compares these rows of the books' projection with the live database's (billing/verify_log.py)."""
    from billing.verify_log import documents

    pay(db, "t01", "150", "pay-1")  # GB1 106.00 (due first), then 44.00 of GB2 (212.00)
    write_off(db, RULES, GB2, "unreachable", now=NOW)  # 212.00 − 44.00 = 168.00
    march = [row for row in documents(db, "2026-03") if row[0] in ("allocation", "write-off")]
    # amounts as ClickHouse writes a Decimal as text (no trailing zeros), the same on both sides
    assert march == [["allocation", f"{GB2} from pay-1", "payment", "", "", "44"],
                     ["write-off", GB2, "", "", "", "168"]]
    assert [row for row in documents(db, "2026-02") if row[0] == "allocation"] == [
        ["allocation", f"{GB1} from pay-1", "payment", "", "", "106"]]
