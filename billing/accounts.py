"""Tenants' accounts as the books stand (issue 38): the documents read, the states derived.

    ledger(db, rules, tenant=None) -> Ledger          every invoice, payment, allocation, credit note, refund, write-off
    today(rules, now=None) -> date                    the date in the billing time zone
    invoice_payments(db, rules, tenant=None, as_of=None) -> {number: InvoiceState}
    invoice_position(db, rules, invoice, as_of=FAR) -> (InvoiceState, issue date)   one invoice, one read
    receivables(db, rules, as_of) -> (rows, total)    aging by due date, per tenant and in total
    statement_of(db, rules, tenant, start, end) -> Statement
    CreditPool(db, rules, tenants=None)               the unapplied credit of tenants, oldest first, to spend
    allocation_id() -> str

The arithmetic is billing_rules/accounts.py's (pure); this module reads the projected tables
(migration 0027) into its documents. An invoice's dates are its `invoice_terms` as issued; an
invoice issued before payments existed has none, and its dates are computed from its issue time
in the billing time zone and today's payment terms.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any, Iterable

from billing_rules.accounts import (
    Aging, Allocation, CreditNoteDoc, InvoiceDoc, InvoiceState, PaymentDoc, RefundDoc, Statement, WriteOffDoc, aging,
    invoice_states, statement, total_of, unapplied, unapplied_with,
)

__all__ = ["CreditPool", "Ledger", "Source", "allocation_id", "date_in", "invoice_payments", "invoice_position", "ledger",
           "receivables", "statement_of", "today"]

FAR = date(9999, 12, 31)
LAST_DATE = date(2149, 6, 6)  # ClickHouse's last Date: FAR as a query parameter


def today(rules: Any, now: datetime | None = None) -> date:
    """The date of `now` (default: the clock) in the billing time zone."""
    return date_in(rules, now or datetime.now(UTC))


def date_in(rules: Any, moment: datetime) -> date:
    """`moment` (naive: UTC) as a date in the billing time zone."""
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment
    return moment.astimezone(rules.billing_tz).date()


def allocation_id() -> str:
    """A new id for the rows of one fact: allocations and write-offs are `<id>-<n>`."""
    return uuid.uuid4().hex[:20]


@dataclass
class Ledger:
    """Every document of an account (of one tenant, or of all): what billing_rules.accounts adds up."""

    invoices: list[InvoiceDoc] = field(default_factory=list)
    allocations: list[Allocation] = field(default_factory=list)
    write_offs: list[WriteOffDoc] = field(default_factory=list)
    payments: list[PaymentDoc] = field(default_factory=list)
    credit_notes: list[CreditNoteDoc] = field(default_factory=list)
    refunds: list[RefundDoc] = field(default_factory=list)

    def states(self, as_of: date) -> dict[str, InvoiceState]:
        return invoice_states(self.invoices, self.allocations, self.write_offs, as_of)

    def unapplied(self, as_of: date, states: dict[str, InvoiceState] | None = None) -> dict[str, Decimal]:
        """Credit each tenant held on `as_of` (billing_rules.accounts.unapplied_with)."""
        return unapplied_with((states if states is not None else self.states(as_of)).values(),
                              unapplied(self.payments, self.credit_notes, self.refunds, self.allocations, as_of))


def _where(tenant: str | None, column: str = "tenant") -> tuple[str, dict]:
    return (f" AND {column} = {{tenant:String}}", {"tenant": tenant}) if tenant is not None else ("", {})


def ledger(db: Any, rules: Any, tenant: str | None = None) -> Ledger:
    """Every document of `tenant`'s account (of every tenant when None), as the projection holds them."""
    where, params = _where(tenant)
    out = Ledger()
    terms_days = timedelta(days=rules.payment_terms_days)
    for number, who, period, status, issued_at, total, issued_on, due_on in db.query(
            "SELECT i.number, i.tenant, i.period, i.status, i.issued_at, i.total, t.issued_on, t.due_on "
            "FROM (SELECT number, tenant, period, status, issued_at, total FROM invoices FINAL "
            f"      WHERE status IN ('issued', 'voided'){where}) AS i "
            "LEFT JOIN (SELECT number, issued_on, due_on FROM invoice_terms FINAL) AS t ON t.number = i.number "
            "SETTINGS join_use_nulls = 1", params):
        if issued_on is None:  # issued before invoices carried their terms
            issued_on = date_in(rules, issued_at)
            due_on = issued_on + terms_days
        out.invoices.append(InvoiceDoc(number, who, period, status, issued_on, due_on, Decimal(total)))
    for who, invoice, kind, source, amount, effective_on in db.query(
            f"SELECT tenant, invoice, source_kind, source, amount, effective_on FROM allocations FINAL WHERE 1{where}",
            params):
        out.allocations.append(Allocation(who, invoice, kind, source, Decimal(amount), effective_on))
    for who, invoice, amount, written_on, source in db.query(
            f"SELECT tenant, invoice, amount, written_on, source FROM write_offs FINAL WHERE 1{where}", params):
        out.write_offs.append(WriteOffDoc(who, invoice, Decimal(amount), written_on, source))
    reversed_on = {ref: on for ref, on in db.query(
        f"SELECT ref, reversed_on FROM payment_reversals FINAL WHERE 1{where}", params)}
    for ref, who, amount, received_on, method in db.query(
            f"SELECT ref, tenant, amount, received_on, method FROM payments FINAL WHERE 1{where}", params):
        out.payments.append(PaymentDoc(ref, who, Decimal(amount), received_on, method, reversed_on.get(ref)))
    for number, who, invoice, issued_at, total in db.query(
            f"SELECT number, tenant, invoice, issued_at, total FROM credit_notes FINAL WHERE 1{where}", params):
        out.credit_notes.append(CreditNoteDoc(number, who, invoice, date_in(rules, issued_at), Decimal(total)))
    for ref, who, note, amount, paid_on in db.query(
            f"SELECT ref, tenant, credit_note, amount, paid_on FROM refunds FINAL WHERE 1{where}", params):
        out.refunds.append(RefundDoc(ref, who, note, Decimal(amount), paid_on))
    return out


def invoice_payments(db: Any, rules: Any, tenant: str | None = None, as_of: date | None = None,
                     now: datetime | None = None) -> dict[str, InvoiceState]:
    """What each issued (or voided) invoice of `tenant` (of all) has been paid and still asks, as of
    `as_of` (default: today in the billing time zone)."""
    return ledger(db, rules, tenant).states(as_of or today(rules, now))


_POSITION_SQL = """
SELECT
    (SELECT sumIf(amount, source_kind = 'payment') FROM allocations FINAL
        WHERE invoice = {n:String} AND effective_on <= {d:Date}),
    (SELECT sumIf(amount, source_kind = 'credit_note') FROM allocations FINAL
        WHERE invoice = {n:String} AND effective_on <= {d:Date}),
    (SELECT sum(amount) FROM write_offs FINAL WHERE invoice = {n:String} AND written_on <= {d:Date}),
    (SELECT groupArray((issued_on, due_on)) FROM invoice_terms FINAL WHERE number = {n:String})
"""


def invoice_position(db: Any, rules: Any, invoice: Any, as_of: date = FAR) -> tuple[InvoiceState, date]:
    """One issued (or voided) invoice's state as of `as_of` (default: everything so far) and its issue
    date, in one read — what a document or a command about that invoice alone needs, instead of its
    tenant's whole `ledger`. `invoice`: anything with number, tenant, period, status, total, issued_at."""
    paid, credited, written, terms = db.query(_POSITION_SQL, {"n": invoice.number, "d": min(as_of, LAST_DATE)})[0]
    if terms:
        issued_on, due_on = terms[0]
    else:  # issued before invoices kept their terms
        issued_on = date_in(rules, datetime.fromisoformat(str(invoice.issued_at).replace("Z", "+00:00")))
        due_on = issued_on + timedelta(days=rules.payment_terms_days)
    doc = InvoiceDoc(invoice.number, invoice.tenant, invoice.period, invoice.status, issued_on, due_on,
                     Decimal(invoice.total))
    sums = [Allocation(invoice.tenant, invoice.number, kind, "", Decimal(amount or 0), issued_on)
            for kind, amount in (("payment", paid), ("credit_note", credited))]
    written_off = [WriteOffDoc(invoice.tenant, invoice.number, Decimal(written or 0), issued_on)]
    return invoice_states([doc], sums, written_off, max(as_of, issued_on))[invoice.number], issued_on


def receivables(db: Any, rules: Any, as_of: date) -> tuple[list[Aging], Aging]:
    """The aging as of `as_of`: one row per tenant with something outstanding or credit held, and the total."""
    books = ledger(db, rules)
    states = books.states(as_of)
    rows = aging(states.values(), books.unapplied(as_of, states))
    return rows, total_of(rows)


def statement_of(db: Any, rules: Any, tenant: str, start: date, end: date) -> Statement:
    """`tenant`'s statement of account from `start` to `end` (billing_rules.accounts.statement)."""
    books = ledger(db, rules, tenant)
    return statement(tenant, start, end, invoices=books.invoices, payments=books.payments,
                     credit_notes=books.credit_notes, refunds=books.refunds, write_offs=books.write_offs)


# ------------------------------------------------------------------------------- unapplied credit


@dataclass
class Source:
    """Credit of one payment or credit note not yet allocated nor refunded."""

    tenant: str
    kind: str  # payment | credit_note
    ref: str
    on: date  # received, or issued
    left: Decimal


def sources(books: Ledger) -> dict[str, list[Source]]:
    """Each tenant's sources with credit left, oldest first (by date, then ref): what it holds unapplied."""
    used: dict[tuple[str, str], Decimal] = {}
    for a in books.allocations:
        key = (a.source_kind, a.source)
        used[key] = used.get(key, Decimal(0)) + a.amount
    for r in books.refunds:
        key = ("credit_note", r.credit_note)
        used[key] = used.get(key, Decimal(0)) + r.amount
    found: dict[str, list[Source]] = {}
    for p in books.payments:
        if p.reversed_on is None:
            left = p.amount - used.get(("payment", p.ref), Decimal(0))
            if left > 0:
                found.setdefault(p.tenant, []).append(Source(p.tenant, "payment", p.ref, p.received_on, left))
    for n in books.credit_notes:
        left = n.total - used.get(("credit_note", n.number), Decimal(0))
        if left > 0:
            found.setdefault(n.tenant, []).append(Source(n.tenant, "credit_note", n.number, n.issued_on, left))
    for listed in found.values():
        listed.sort(key=lambda s: (s.on, s.kind, s.ref))
    return found


class CreditPool:
    """The unapplied credit of tenants, spent oldest first as invoices are issued (billing/invoicing.py)
    or credit is applied; read once, then counted on (an invoice run records in groups: the
    projection has not seen the group yet). Hold the invoicing lease while it lives."""

    def __init__(self, db: Any, rules: Any, tenant: str | None = None) -> None:
        self.by_tenant = sources(ledger(db, rules, tenant))

    def held(self, tenant: str) -> Decimal:
        return sum((s.left for s in self.by_tenant.get(tenant, ())), Decimal(0))

    def spend(self, tenant: str, invoice: str, issued_on: date, amount: Decimal, *, reason: str, fact_id: str,
              recorded_at: datetime, first_no: int = 1) -> list[Any]:
        """Allocate up to `amount` of `tenant`'s credit to `invoice`, oldest source first; the AllocationRows
        (ids `fact_id`-n from `first_no`). Each counts from the later of its source's date and the issue date."""
        from schemas.books import AllocationRow

        rows, left, no = [], amount, first_no
        for source in self.by_tenant.get(tenant, ()):
            if left <= 0:
                break
            take = min(left, source.left)
            if take <= 0:
                continue
            source.left -= take
            left -= take
            rows.append(AllocationRow(id=f"{fact_id}-{no}", tenant=tenant, invoice=invoice, source_kind=source.kind,
                                      source=source.ref, amount=take, effective_on=max(source.on, issued_on),
                                      reason=reason, recorded_at=recorded_at))
            no += 1
        return rows


def outstanding_of(states: Iterable[InvoiceState], docs: Iterable[InvoiceDoc]) -> list[tuple[str, Decimal]]:
    """(number, outstanding) of the issued invoices with something outstanding, oldest due date first."""
    by_number = {d.number: d for d in docs if d.status == "issued"}
    found = [(by_number[s.number].due_on, by_number[s.number].issued_on, s.number, s.outstanding)
             for s in states if s.number in by_number and s.outstanding > 0]
    return [(number, amount) for _, _, number, amount in sorted(found)]
