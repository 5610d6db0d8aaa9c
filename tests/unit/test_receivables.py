"""Receivables and statements of account, pure (billing_rules/accounts.py; issue 38).

Aging by days past the *due* date, edges inclusive (day 0 not yet due, day 30 in d1_30, day 90
in d61_90); "as of" counts only what had happened by then (an allocation from its
`effective_on`); unapplied credit; a statement's opening and closing balances and the identity
closing = Σ outstanding − unapplied as of its last day. Every figure is worked out by hand in a
comment, or by the model at the end (a history simulated with fractions.Fraction, its own
arithmetic, never this module's).
"""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal as D
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing_rules.accounts import (
    Aging, Allocation, CreditNoteDoc, InvoiceDoc, PaymentDoc, RefundDoc, WriteOffDoc, aging, bucket_of, invoice_states,
    statement, total_of, unapplied,
)

T = "acme"
MAR_1, MAR_16 = date(2026, 3, 1), date(2026, 3, 16)  # issued on the 1st, due 15 days later


def invoice(number: str, total: str, issued_on: date = MAR_1, due_on: date = MAR_16, tenant: str = T,
            status: str = "issued") -> InvoiceDoc:
    return InvoiceDoc(number, tenant, "2026-02", status, issued_on, due_on, D(total))


def paid(number: str, amount: str, on: date, source: str = "pay-1", kind: str = "payment",
         tenant: str = T) -> Allocation:
    return Allocation(tenant, number, kind, source, D(amount), on)


# ------------------------------------------------------------------------------------ buckets


@pytest.mark.parametrize("days, bucket", [
    (-15, "current"), (-1, "current"), (0, "current"),  # not yet due, the due date itself included
    (1, "d1_30"), (30, "d1_30"),
    (31, "d31_60"), (60, "d31_60"),
    (61, "d61_90"), (90, "d61_90"),
    (91, "d90_plus"), (400, "d90_plus"),
])
def test_the_bucket_of_days_past_due_has_inclusive_edges(days, bucket):
    assert bucket_of(days) == bucket


@pytest.mark.parametrize("as_of, bucket", [
    (date(2026, 3, 1), "current"),  # issued today, due in 15 days
    (date(2026, 3, 16), "current"),  # day 0: the due date
    (date(2026, 3, 17), "d1_30"),  # day 1
    (date(2026, 4, 15), "d1_30"),  # day 30: 15 days of March after the 16th + 15 of April
    (date(2026, 4, 16), "d31_60"),  # day 31
    (date(2026, 6, 14), "d61_90"),  # day 90: 15 + 30 (April) + 31 (May) + 14
    (date(2026, 6, 15), "d90_plus"),  # day 91
])
def test_an_invoice_ages_by_its_due_date_not_its_issue_date(as_of, bucket):
    (row,) = aging(invoice_states([invoice("GB-2026-000001", "100.00")], [], [], as_of).values(), {})
    assert row.tenant == T and getattr(row, bucket) == D("100.00") and row.outstanding == D("100.00")
    others = [name for name in ("current", "d1_30", "d31_60", "d61_90", "d90_plus") if name != bucket]
    assert all(getattr(row, name) == 0 for name in others)


def test_an_invoice_not_issued_yet_is_not_aged():
    docs = [invoice("GB-2026-000001", "100.00", issued_on=date(2026, 3, 5), due_on=date(2026, 3, 20))]
    assert invoice_states(docs, [], [], date(2026, 3, 4)) == {}
    assert aging(invoice_states(docs, [], [], date(2026, 3, 4)).values(), {}) == []


# --------------------------------------------------------------------------------------- as of


def test_as_of_a_date_a_later_receipt_is_not_subtracted():
    """¥100.00 due 03-16; ¥60.00 received 03-20 (effective 03-20, though recorded later)."""
    docs = [invoice("GB-2026-000001", "100.00")]
    allocations = [paid("GB-2026-000001", "60.00", date(2026, 3, 20))]
    before = invoice_states(docs, allocations, [], date(2026, 3, 19))["GB-2026-000001"]
    assert (before.paid, before.outstanding, before.payment_state, before.overdue) == (
        D("0.00"), D("100.00"), "unpaid", True)  # 3 days past due
    after = invoice_states(docs, allocations, [], date(2026, 3, 20))["GB-2026-000001"]
    assert (after.paid, after.outstanding, after.payment_state, after.days_past_due) == (
        D("60.00"), D("40.00"), "partially_paid", 4)
    (row,) = aging(invoice_states(docs, allocations, [], date(2026, 3, 20)).values(), {})
    assert row.d1_30 == D("40.00") == row.outstanding


def test_an_allocation_counts_from_its_effective_date_the_later_of_receipt_and_issue():
    """¥100.00 received 03-05, before the invoice was issued (03-10): held as credit until the
    invoice is issued, then spent on it — the allocation is effective 03-10, not 03-05."""
    docs = [invoice("GB-2026-000001", "100.00", issued_on=date(2026, 3, 10), due_on=date(2026, 3, 25))]
    payments = [PaymentDoc("pay-1", T, D("100.00"), date(2026, 3, 5))]
    allocations = [paid("GB-2026-000001", "100.00", date(2026, 3, 10))]
    assert unapplied(payments, [], [], allocations, date(2026, 3, 9)) == {T: D("100.00")}
    assert invoice_states(docs, allocations, [], date(2026, 3, 9)) == {}
    assert unapplied(payments, [], [], allocations, date(2026, 3, 10)) == {}  # tenants with none are left out
    state = invoice_states(docs, allocations, [], date(2026, 3, 10))["GB-2026-000001"]
    assert (state.paid, state.outstanding, state.payment_state) == (D("100.00"), D("0.00"), "paid")


def test_credit_notes_and_write_offs_reduce_what_is_outstanding_from_their_dates():
    """¥500.00 due 03-16: ¥200.00 paid 03-10, a credit note of ¥50.00 on 03-12, the rest (¥250.00)
    written off 06-30; a recovery of ¥30.00 (negative write-off) paid 07-15."""
    docs = [invoice("GB-2026-000001", "500.00")]
    allocations = [paid("GB-2026-000001", "200.00", date(2026, 3, 10)),
                   paid("GB-2026-000001", "50.00", date(2026, 3, 12), "CN-2026-000001", "credit_note"),
                   paid("GB-2026-000001", "30.00", date(2026, 7, 15), "pay-2")]
    write_offs = [WriteOffDoc(T, "GB-2026-000001", D("250.00"), date(2026, 6, 30)),
                  WriteOffDoc(T, "GB-2026-000001", D("-30.00"), date(2026, 7, 15), "pay-2")]
    june = invoice_states(docs, allocations, write_offs, date(2026, 6, 29))["GB-2026-000001"]
    assert (june.paid, june.credited, june.written_off, june.outstanding) == (
        D("200.00"), D("50.00"), D("0.00"), D("250.00"))  # 500 − 200 − 50
    assert bucket_of(june.days_past_due) == "d90_plus"  # 03-16 → 06-29: 15 + 30 + 31 + 29 = 105 days
    july = invoice_states(docs, allocations, write_offs, date(2026, 6, 30))["GB-2026-000001"]
    assert (july.written_off, july.outstanding, july.payment_state, july.overdue) == (
        D("250.00"), D("0.00"), "partially_paid", False)  # a write-off does not pay
    later = invoice_states(docs, allocations, write_offs, date(2026, 7, 15))["GB-2026-000001"]
    assert (later.paid, later.written_off, later.outstanding) == (D("230.00"), D("220.00"), D("0.00"))


# ------------------------------------------------------------------------------------ unapplied


def test_unapplied_is_payments_and_credit_notes_less_allocations_and_refunds():
    """acme: ¥1,000.00 received 03-02, ¥300.00 of it allocated 03-02; a credit note of ¥80.00 on
    03-05 of which ¥50.00 refunded on 03-06; ¥200.00 received 03-08 and reversed 03-12.
    beta: ¥40.00 received 03-03, all allocated."""
    payments = [PaymentDoc("pay-1", T, D("1000.00"), date(2026, 3, 2)),
                PaymentDoc("pay-2", T, D("200.00"), date(2026, 3, 8), reversed_on=date(2026, 3, 12)),
                PaymentDoc("pay-b", "beta", D("40.00"), date(2026, 3, 3))]
    notes = [CreditNoteDoc("CN-2026-000001", T, "GB-2026-000001", date(2026, 3, 5), D("80.00"))]
    refunds = [RefundDoc("refund-1", T, "CN-2026-000001", D("50.00"), date(2026, 3, 6))]
    allocations = [paid("GB-2026-000001", "300.00", date(2026, 3, 2)),
                   paid("GB-2026-000002", "40.00", date(2026, 3, 3), "pay-b", tenant="beta")]
    assert unapplied(payments, notes, refunds, allocations, date(2026, 3, 1)) == {}
    assert unapplied(payments, notes, refunds, allocations, date(2026, 3, 5)) == {T: D("780.00")}  # 1000 − 300 + 80
    assert unapplied(payments, notes, refunds, allocations, date(2026, 3, 6)) == {T: D("730.00")}  # − 50 refunded
    assert unapplied(payments, notes, refunds, allocations, date(2026, 3, 8)) == {T: D("930.00")}  # + 200
    assert unapplied(payments, notes, refunds, allocations, date(2026, 3, 12)) == {T: D("730.00")}  # reversed


def test_the_total_adds_the_tenants_up():
    rows = [Aging("acme", current=D("10.00"), d1_30=D("5.50"), unapplied=D("1.00")),
            Aging("beta", d1_30=D("0.50"), d90_plus=D("100.00"))]
    total = total_of(rows)
    assert (total.tenant, total.current, total.d1_30, total.d90_plus, total.outstanding, total.unapplied) == (
        "", D("10.00"), D("6.00"), D("100.00"), D("116.00"), D("1.00"))  # 10 + 6 + 100
    assert total.as_dict()["outstanding"] == "116.00" and rows[1].as_dict()["d31_60"] == "0.00"


# ------------------------------------------------------------------------------------ statement


def test_a_statement_has_an_opening_balance_running_balances_and_a_closing_balance():
    """acme, statement for March 2026:

        02-01  invoice GB-…01 (January)     +300.00    (before March: opening)
        02-20  payment pay-1                −100.00    (before March: opening)  → opening 200.00
        03-01  invoice GB-…02 (February)    +500.00    → 700.00
        03-01  payment pay-2                −200.00    → 500.00  (same day: the invoice first)
        03-10  credit note CN-…01           − 50.00    → 450.00
        03-15  refund refund-1 of CN-…01    + 20.00    → 470.00
        03-20  pay-2 reversed               +200.00    → 670.00
        03-31  GB-…01 written off           −200.00    → 470.00
        04-02  payment pay-3                −470.00    (after March: not in it)   closing 470.00
    """
    jan = InvoiceDoc("GB-2026-000001", T, "2026-01", "issued", date(2026, 2, 1), date(2026, 2, 16), D("300.00"))
    feb = InvoiceDoc("GB-2026-000002", T, "2026-02", "issued", MAR_1, MAR_16, D("500.00"))
    other = InvoiceDoc("GB-2026-000003", "beta", "2026-02", "issued", MAR_1, MAR_16, D("999.00"))
    s = statement(T, date(2026, 3, 1), date(2026, 3, 31), invoices=[feb, jan, other],
                  payments=[PaymentDoc("pay-1", T, D("100.00"), date(2026, 2, 20), "bank"),
                            PaymentDoc("pay-2", T, D("200.00"), MAR_1, "alipay", reversed_on=date(2026, 3, 20)),
                            PaymentDoc("pay-3", T, D("470.00"), date(2026, 4, 2))],
                  credit_notes=[CreditNoteDoc("CN-2026-000001", T, "GB-2026-000002", date(2026, 3, 10), D("50.00"))],
                  refunds=[RefundDoc("refund-1", T, "CN-2026-000001", D("20.00"), date(2026, 3, 15))],
                  write_offs=[WriteOffDoc(T, "GB-2026-000001", D("200.00"), date(2026, 3, 31))])
    assert s.opening == D("200.00")
    assert [(e.on.day, e.kind, e.document, e.amount, e.balance) for e in s.entries] == [
        (1, "invoice", "GB-2026-000002", D("500.00"), D("700.00")),
        (1, "payment", "pay-2", D("-200.00"), D("500.00")),
        (10, "credit_note", "CN-2026-000001", D("-50.00"), D("450.00")),
        (15, "refund", "refund-1", D("20.00"), D("470.00")),
        (20, "payment_reversed", "pay-2", D("200.00"), D("670.00")),
        (31, "write_off", "GB-2026-000001", D("-200.00"), D("470.00")),
    ]
    assert s.closing == D("470.00")
    assert s.entries[1].description == "payment pay-2 (alipay)"


def test_a_statement_of_a_period_without_movements_opens_and_closes_alike():
    jan = InvoiceDoc("GB-2026-000001", T, "2026-01", "issued", date(2026, 2, 1), date(2026, 2, 16), D("300.00"))
    s = statement(T, date(2026, 5, 1), date(2026, 5, 31), invoices=[jan], payments=[], credit_notes=[], refunds=[],
                  write_offs=[])
    assert (s.opening, s.entries, s.closing) == (D("300.00"), (), D("300.00"))


# ------------------------------------------------------------------------------ the identity


class _History:
    """A tenant's account simulated day by day with Fractions, as the writers would record it:
    an invoice takes the credit held (oldest first) when issued; a payment goes to what is
    outstanding, oldest due date first, the rest held; a credit note to its own invoice first, the
    rest held or refunded; a write-off takes what remains; a reversal undoes a payment's allocations."""

    def __init__(self) -> None:
        self.invoices: list[InvoiceDoc] = []
        self.payments: list[PaymentDoc] = []
        self.notes: list[CreditNoteDoc] = []
        self.refunds: list[RefundDoc] = []
        self.allocations: list[Allocation] = []
        self.write_offs: list[WriteOffDoc] = []
        self.owed: dict[str, Fraction] = {}  # what each invoice still asks
        self.due: dict[str, date] = {}
        self.held: list[list] = []  # [kind, ref, left] oldest first
        self.by_payment: dict[str, dict[str, Fraction]] = {}

    def _allocate(self, number: str, kind: str, ref: str, amount: Fraction, on: date) -> None:
        self.owed[number] -= amount
        if kind == "payment":
            self.by_payment.setdefault(ref, {})[number] = self.by_payment.get(ref, {}).get(number, 0) + amount
        self.allocations.append(Allocation(T, number, kind, ref, _d(amount), on))

    def issue(self, on: date, fen: int) -> None:
        number = f"GB-2026-{len(self.invoices) + 1:06d}"
        self.invoices.append(InvoiceDoc(number, T, "2026-01", "issued", on, on + timedelta(days=15), _d(fen)))
        self.owed[number], self.due[number] = Fraction(fen, 100), on + timedelta(days=15)
        for source in self.held:
            take = min(source[2], self.owed[number])
            if take > 0:
                source[2] -= take
                self._allocate(number, source[0], source[1], take, on)

    def pay(self, on: date, fen: int) -> None:
        ref, left = f"pay-{len(self.payments) + 1}", Fraction(fen, 100)
        self.payments.append(PaymentDoc(ref, T, _d(fen), on))
        for number in sorted((n for n in self.owed if self.owed[n] > 0), key=lambda n: (self.due[n], n)):
            take = min(left, self.owed[number])
            if take > 0:
                left -= take
                self._allocate(number, "payment", ref, take, on)
        self.held.append(["payment", ref, left])

    def credit(self, on: date, which: int, fen: int, refund: bool) -> None:
        if not self.invoices:
            return
        number = self.invoices[which % len(self.invoices)].number
        ref, total = f"CN-2026-{len(self.notes) + 1:06d}", Fraction(fen, 100)
        self.notes.append(CreditNoteDoc(ref, T, number, on, _d(fen)))
        take = min(total, self.owed[number])
        if take > 0:
            self._allocate(number, "credit_note", ref, take, on)
        if total - take > 0 and refund:
            self.refunds.append(RefundDoc(f"refund-{ref}", T, ref, _d(total - take), on))
        else:
            self.held.append(["credit_note", ref, total - take])

    def write_off(self, on: date, which: int) -> None:
        if not self.invoices:
            return
        number = self.invoices[which % len(self.invoices)].number
        if self.owed[number] > 0:
            self.write_offs.append(WriteOffDoc(T, number, _d(self.owed[number]), on))
            self.owed[number] = Fraction(0)

    def reverse(self, on: date, which: int) -> None:
        live = [p for p in self.payments if p.reversed_on is None]
        if not live:
            return
        payment = live[which % len(live)]
        self.payments[self.payments.index(payment)] = PaymentDoc(payment.ref, T, payment.amount, payment.received_on,
                                                                 reversed_on=on)
        for number, amount in self.by_payment.pop(payment.ref, {}).items():
            self.owed[number] += amount
            self.allocations.append(Allocation(T, number, "payment", payment.ref, -_d(amount), on))
        self.held = [s for s in self.held if s[1] != payment.ref]


def _d(value: int | Fraction) -> D:
    """Fen (an int) or yuan (a Fraction of whole fen) as Decimal yuan with two decimals."""
    fen = value if isinstance(value, int) else value * 100
    assert Fraction(fen).denominator == 1
    return D(int(fen)).scaleb(-2)


_STEPS = st.lists(st.tuples(
    st.sampled_from(("issue", "pay", "credit", "refund", "write_off", "reverse")),
    st.integers(0, 3),  # days after the previous step
    st.integers(1, 500_00),  # fen
    st.integers(0, 50),  # which document
), max_size=25)


@settings(max_examples=150, deadline=None)
@given(_STEPS)
def test_closing_balance_is_what_is_outstanding_less_the_credit_held(steps):
    """For every day of a simulated history: the statement from its first day closes at
    Σ outstanding − unapplied as of that day, the aging says the same, and the next day's
    statement opens where it closed."""
    history, day = _History(), date(2026, 1, 1)
    first = day
    for kind, gap, fen, which in steps:
        day += timedelta(days=gap)
        if kind == "issue":
            history.issue(day, fen)
        elif kind == "pay":
            history.pay(day, fen)
        elif kind in ("credit", "refund"):
            history.credit(day, which, fen, refund=kind == "refund")
        elif kind == "write_off":
            history.write_off(day, which)
        else:
            history.reverse(day, which)
    docs = dict(invoices=history.invoices, payments=history.payments, credit_notes=history.notes,
                refunds=history.refunds, write_offs=history.write_offs)
    for offset in range((day - first).days + 2):
        as_of = first + timedelta(days=offset)
        states = invoice_states(history.invoices, history.allocations, history.write_offs, as_of)
        held = unapplied(history.payments, history.notes, history.refunds, history.allocations, as_of).get(T, D(0))
        owed = sum((s.outstanding for s in states.values()), D(0))
        closing = statement(T, first, as_of, **docs).closing
        assert closing == owed - held, as_of
        rows = aging(states.values(), {T: held} if held else {})
        assert sum((r.outstanding - r.unapplied for r in rows), D(0)) == closing
        assert statement(T, as_of + timedelta(days=1), as_of + timedelta(days=9), **docs).opening == closing
    # and at the end, every invoice asks what the model says it still asks
    final = invoice_states(history.invoices, history.allocations, history.write_offs, day)
    assert {n: s.outstanding for n, s in final.items()} == {n: _d(v) for n, v in history.owed.items()}
