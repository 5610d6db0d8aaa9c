"""The year of accounts that `gpubill bench receivables` projects (gpubill/bench/receivables.py): the
documents of `gpubill bench books`' year (gpubill/bench/books_year.py) with what issue 38 adds to them —
payments, allocations, credit spent at issue, refunds, reversals and write-offs — as schemas/books.py facts.

Deterministic (seeded). What the year's documents become, as the commands would record them:

- every issued invoice carries its terms (issued on its issue time's date in the billing time
  zone, due `payment_terms_days` later) and the tenant's unapplied credit spent on it, oldest
  source first (billing/invoicing.py with billing/accounts.py `CreditPool`);
- a credit note first goes to what its invoice still asks; the part beyond is held as credit,
  or — for half of the goodwill notes on a postpaid invoice already paid — refunded
  (billing/payments.py `credit_note_effects`);
- a prepaid tenant's top-up is a payment (source top_up), allocated to what it owes, oldest due
  date first, the rest held as credit (billing/balances.py `top_up`);
- a tenant pays what its credit did not cover of each invoice by bank transfer as its habit
  says: on time in full (55 %), late (20 %), half or more on time and the rest late (10 %),
  months late (8 %), rounded up to the next ¥500 (5 %: the rest held as credit), or stops
  paying from a month between March and August (2 %: what is 120 days past due is written off); a payment is allocated
  oldest due date first (billing/payments.py `record_payment` without --invoice);
- one payment in 250 bounces 3 to 10 days after it was received (reversed: its allocations undone),
  and is paid again 5 days later.

Payments, reversals and write-offs are recorded in the order of their dates among the facts of
the year of books (one dated before a fact's day is recorded before it); those dated after the
last of them are recorded at the end: an "as of" report must leave them out.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import ROUND_CEILING, Decimal
from typing import Any

from billing.accounts import date_in
from billing_rules.accounts import allocate
from gpubill.bench.books_year import WRITER, YearOfBooks, year_of_books
from schemas.books import (
    AllocationRow, BooksEvent, CreditNoteIssued, InvoiceFact, InvoiceTermsRow, InvoiceWrittenOff, Party,
    PaymentRecorded, PaymentReversalRow, PaymentReversed, PaymentRow, RefundRow, TopUpRecorded, WriteOffRow,
)

__all__ = ["YearOfAccounts", "year_of_accounts"]

ZERO = Decimal("0.00")
ACTOR = "os:bench"
HABITS = (("prompt", 55), ("late", 20), ("partial", 10), ("slow", 8), ("rounds_up", 5), ("stops", 2))
WRITE_OFF_AFTER_DAYS = 120
BOUNCE_ONE_IN = 250


@dataclass
class YearOfAccounts:
    """The counts of what `year_of_accounts` yielded, beside the year of books' own."""

    books: YearOfBooks = field(default_factory=YearOfBooks)
    payments: int = 0
    partial_payments: int = 0
    allocations: int = 0
    reversals: int = 0
    refunds: int = 0
    write_offs: int = 0
    last_on: date = date.min  # the latest date of a fact


@dataclass
class _Invoice:
    tenant: str
    issued_on: date
    due_on: date
    outstanding: Decimal


@dataclass
class _Source:
    """Credit of a payment or credit note not allocated yet (billing/accounts.py `Source`)."""

    kind: str
    ref: str
    on: date
    left: Decimal


class _Accounts:
    """Every tenant's account as the facts so far leave it, so that each new fact allocates what
    the command would: never more than an invoice still asks, never more than a source holds."""

    def __init__(self, rules: Any, counts: YearOfAccounts) -> None:
        self.rules, self.counts = rules, counts
        self.invoices: dict[str, _Invoice] = {}
        self.credit: dict[str, list[_Source]] = {}
        self.by_source: dict[str, list[tuple[str, Decimal]]] = {}  # a payment's allocations (to reverse them)
        self.fact_no = 0

    def _id(self) -> str:
        self.fact_no += 1
        return f"bench{self.fact_no:010d}"

    def _allocation(self, fact_id: str, no: int, tenant: str, invoice: str, kind: str, source: str, amount: Decimal,
                    on: date, reason: str, at: datetime) -> AllocationRow:
        self.invoices[invoice].outstanding -= amount
        self.by_source.setdefault(source, []).append((invoice, amount))
        self.counts.allocations += 1
        return AllocationRow(id=f"{fact_id}-{no}", tenant=tenant, invoice=invoice, source_kind=kind, source=source,
                             amount=amount, effective_on=max(on, self.invoices[invoice].issued_on), reason=reason,
                             recorded_at=at)

    def _oldest_due(self, tenant: str) -> list[tuple[str, Decimal]]:
        owed = sorted((i.due_on, i.issued_on, n, i.outstanding) for n, i in self.invoices.items()
                      if i.tenant == tenant and i.outstanding > 0)
        return [(n, o) for *_, n, o in owed]

    def issue(self, fact: InvoiceFact) -> InvoiceFact:
        """An issued invoice with its terms and the tenant's credit spent on it, oldest source first."""
        header = fact.header
        on = date_in(self.rules, header.issued_at)
        due = on + timedelta(days=self.rules.payment_terms_days)
        self.invoices[header.number] = _Invoice(header.tenant, on, due, header.total)
        fact_id, rows = self._id(), []
        for source in self.credit.get(header.tenant, []):
            take = min(source.left, self.invoices[header.number].outstanding)
            if take <= 0:
                continue
            source.left -= take
            rows.append(self._allocation(fact_id, len(rows) + 1, header.tenant, header.number, source.kind, source.ref,
                                         take, max(source.on, on), "credit", header.issued_at))
        self._tidy(header.tenant)
        terms = InvoiceTermsRow(number=header.number, tenant=header.tenant, issued_on=on, due_on=due)
        return fact.model_copy(update={"terms": terms, "allocations": tuple(rows)})

    def credit_note(self, fact: CreditNoteIssued, refund: bool) -> CreditNoteIssued:
        """The note to its invoice first; the rest held as credit, or (`refund`) paid back."""
        note = fact.note
        on = date_in(self.rules, note.issued_at)
        take = min(note.total, self.invoices[note.invoice].outstanding)
        rows = (self._allocation(self._id(), 1, note.tenant, note.invoice, "credit_note", note.number, take, on,
                                 "credit_note", note.issued_at),) if take > 0 else ()
        beyond, refunded = note.total - take, None
        if beyond > 0 and refund:
            refunded = RefundRow(ref=f"refund-{note.number}", tenant=note.tenant, credit_note=note.number,
                                 amount=beyond, paid_on=on, note=f"credit note {note.number} beyond {note.invoice}",
                                 actor=ACTOR, recorded_at=note.issued_at)
            self.counts.refunds += 1
        elif beyond > 0:
            self.credit.setdefault(note.tenant, []).append(_Source("credit_note", note.number, on, beyond))
        return fact.model_copy(update={"allocations": rows, "refund": refunded})

    def pay(self, tenant: str, ref: str, amount: Decimal, on: date, at: datetime, source: str = "manual",
            ) -> tuple[PaymentRow, tuple[AllocationRow, ...]]:
        """A payment allocated oldest due date first, the rest held as credit."""
        fact_id, rows = self._id(), []
        for number, take in allocate(self._oldest_due(tenant), amount):
            rows.append(self._allocation(fact_id, len(rows) + 1, tenant, number, "payment", ref, take, on, "payment",
                                         at))
        left = amount - sum((r.amount for r in rows), ZERO)
        if left > 0:
            self.credit.setdefault(tenant, []).append(_Source("payment", ref, on, left))
        self.counts.payments += 1
        method = "other" if source == "top_up" else "bank"
        row = PaymentRow(ref=ref, tenant=tenant, amount=amount, method=method, received_on=on, source=source,
                         bank_txn="", payer="", remittance="", note="", actor=ACTOR, recorded_at=at)
        return row, tuple(rows)

    def reverse(self, tenant: str, ref: str, amount: Decimal, on: date, at: datetime) -> PaymentReversed:
        """Payment `ref` bounced: each of its allocations undone, its credit no longer held."""
        fact_id, rows = self._id(), []
        undone: dict[str, Decimal] = {}
        for invoice, amount_on in self.by_source.pop(ref, []):
            undone[invoice] = undone.get(invoice, ZERO) + amount_on
        for no, (invoice, back) in enumerate(sorted(undone.items()), start=1):
            if back:
                self.invoices[invoice].outstanding += back
                self.counts.allocations += 1
                rows.append(AllocationRow(id=f"{fact_id}-{no}", tenant=tenant, invoice=invoice, source_kind="payment",
                                          source=ref, amount=-back, effective_on=on, reason="reversal", recorded_at=at))
        self.credit[tenant] = [s for s in self.credit.get(tenant, []) if s.ref != ref]
        self.counts.reversals += 1
        return PaymentReversed(kind="payment_reversed", allocations=tuple(rows), reversal=PaymentReversalRow(
            ref=ref, tenant=tenant, amount=amount, reason="bounced", reversed_on=on, actor=ACTOR, recorded_at=at))

    def write_off(self, number: str, on: date, at: datetime) -> InvoiceWrittenOff | None:
        invoice = self.invoices[number]
        if invoice.outstanding <= 0:
            return None
        amount, invoice.outstanding = invoice.outstanding, ZERO
        self.counts.write_offs += 1
        return InvoiceWrittenOff(kind="invoice_written_off", write_off=WriteOffRow(
            id=f"{self._id()}-w", tenant=invoice.tenant, invoice=number, amount=amount, reason="uncollectible",
            source="", written_on=on, actor=ACTOR, recorded_at=at))

    def _tidy(self, tenant: str) -> None:
        self.credit[tenant] = [s for s in self.credit.get(tenant, []) if s.left > 0]


def _at(on: date) -> datetime:
    """A moment of the billing day `on` (10:00 in Shanghai): when a payment of that day is recorded."""
    return datetime.combine(on, time(2), tzinfo=UTC)


def year_of_accounts(tenants: int, months: int, year: int, rules: Any, seller: Party | None,
                     counts: YearOfAccounts, seed: int = 38) -> Iterator[list[BooksEvent]]:
    """The year's facts, a batch at a time, in the order they are recorded (module docstring)."""
    rng = random.Random(seed)
    accounts = _Accounts(rules, counts)
    habits = {}
    names, weights = zip(*HABITS)
    for k in range(tenants):
        habits[f"tenant-{k:04d}"] = rng.choices(names, weights)[0]
    stops_in = {t: rng.randrange(3, 9) for t in habits}
    prepaid: set[str] = set()
    pending: list[tuple[date, int, str, tuple]] = []  # (on, order, what, details): payments, reversals, write-offs
    order = 0

    def later(on: date, what: str, *details: Any) -> None:
        nonlocal order
        order += 1
        heapq.heappush(pending, (on, order, what, details))

    def due_until(until: date | None) -> list[BooksEvent]:
        batch = []
        while pending and (until is None or pending[0][0] < until):
            on, _, what, details = heapq.heappop(pending)
            counts.last_on = max(counts.last_on, on)
            fact: Any = None
            if what == "pay":
                tenant, ref, amount = details
                payment, rows = accounts.pay(tenant, ref, amount, on, _at(on))
                fact = PaymentRecorded(kind="payment_recorded", payment=payment, allocations=rows)
                if rng.randrange(BOUNCE_ONE_IN) == 0:
                    later(on + timedelta(days=rng.randrange(3, 11)), "bounce", tenant, ref, amount)
            elif what == "bounce":
                tenant, ref, amount = details
                fact = accounts.reverse(tenant, ref, amount, on, _at(on))
                later(on + timedelta(days=5), "pay", tenant, f"{ref}-again", amount)
            elif what == "write_off":
                fact = accounts.write_off(details[0], on, _at(on))
            if fact is not None:
                batch.append(BooksEvent(at=_at(on), writer=WRITER, fact=fact))
        return batch

    def schedule(tenant: str, number: str, total: Decimal, issued_on: date, due_on: date, month: int) -> None:
        """When and how much `tenant` pays of invoice `number`, by its habit."""
        if total <= 0:
            return
        habit, days = habits[tenant], rng.randrange
        if habit == "stops" and month >= stops_in[tenant]:
            later(due_on + timedelta(days=WRITE_OFF_AFTER_DAYS), "write_off", number)
            return
        if habit == "partial":
            first = (total * Decimal(days(50, 91)) / 100).quantize(Decimal("0.01"))
            later(issued_on + timedelta(days=days(3, 16)), "pay", tenant, f"bank-{number}-1", first)
            later(due_on + timedelta(days=days(20, 61)), "pay", tenant, f"bank-{number}-2", total - first)
            counts.partial_payments += 1
            return
        amount, on = total, issued_on + timedelta(days=days(2, 16))
        if habit == "late":
            on = due_on + timedelta(days=days(5, 46))
        elif habit == "slow":
            on = due_on + timedelta(days=days(30, 71))
        elif habit == "rounds_up":
            amount = (total / 500).to_integral_value(ROUND_CEILING) * 500
        later(on, "pay", tenant, f"bank-{number}", amount)

    for batch in year_of_books(tenants, months, year, rules.revision, seller, counts.books):
        out = []
        for event in batch:
            fact, at = event.fact, event.at
            out += due_until(date_in(rules, at))  # what was received before it, recorded before it
            counts.last_on = max(counts.last_on, date_in(rules, at))
            if isinstance(fact, TopUpRecorded):
                prepaid.add(fact.top_up.tenant)
                on = date_in(rules, fact.top_up.created_at)
                payment, rows = accounts.pay(fact.top_up.tenant, fact.top_up.ref, fact.top_up.amount, on, at, "top_up")
                fact = fact.model_copy(update={"payment": payment, "allocations": rows})
            elif isinstance(fact, InvoiceFact) and fact.kind == "invoice_issued":
                fact = accounts.issue(fact)
                header = fact.header
                invoice = accounts.invoices[header.number]
                if invoice.outstanding > 0:  # a prepaid tenant pays what its credit did not cover
                    schedule(header.tenant, header.number, invoice.outstanding, invoice.issued_on, invoice.due_on,
                             int(header.period[5:]))
            elif isinstance(fact, CreditNoteIssued):
                paid = accounts.invoices[fact.note.invoice].outstanding < fact.note.total
                refund = (fact.note.reason == "goodwill" and paid and fact.note.tenant not in prepaid
                          and rng.random() < 0.5)
                fact = accounts.credit_note(fact, refund)
            out.append(BooksEvent(at=at, writer=event.writer, fact=fact))
        yield out
    rest = due_until(None)
    if rest:
        yield rest
