"""A tenant's account (issue 38): what each invoice has been paid, what is owed, how late — derived, never stored.

    invoice_states(invoices, allocations, write_offs, as_of) -> {number: InvoiceState}
    unapplied(payments, credit_notes, refunds, allocations, as_of) -> {tenant: Decimal}
    aging(invoices, allocations, write_offs, unapplied_by_tenant, as_of) -> [Aging]   one per tenant, by id
    statement(tenant, start, end, ...) -> Statement                                   对账单
    allocate(outstanding, amount) -> [(invoice, amount)]                              oldest due date first

The facts are on the books (schemas/books.py); these functions only add them up. Money is
Decimal CNY with VAT, two decimals, never rounded here (every fact is already in fen).

An account has *sources* of money — payments (less their reversals) and credit notes — and
*uses* — invoices, refunds paid out. An **allocation** moves an amount of one source onto one
invoice; a **write-off** marks part of an invoice uncollectible (a negative write-off row is a
recovery: a later payment or credit note that reached what had been written off). For an invoice:

    paid        = Σ its allocations from payments
    credited    = Σ its allocations from credit notes (a credit note first reduces its own invoice)
    written_off = Σ its write-off rows (recoveries negative)
    outstanding = total − paid − credited − written_off          (never below zero: the writers check)

and for a tenant, `unapplied` (credit held) = Σ payments + Σ credit notes − Σ allocations − Σ refunds.
So outstanding − unapplied = invoices − payments − credit notes + refunds − write-offs: allocations
cancel, and a statement's closing balance is exactly that (tests hold the identity).

**As of a date** (billing time zone), only what had happened counts: invoices and credit notes
issued, payments received (and reversals made), refunds paid, write-offs made on or before it.
An allocation counts from its `effective_on`: the later of its source's date and its invoice's
issue date (written with the allocation: a payment received on the 5th for an invoice issued on
the 2nd pays it from the 5th, even when recorded on the 20th) — so an "as of" report never
subtracts a receipt that came later.

**Aging** buckets each invoice's outstanding as of the date by days past its *due* date (not its
issue date): `current` (not yet due, the due date itself included), `d1_30` (1 to 30 days past,
day 30 included), `d31_60`, `d61_90`, `d90_plus`.

Pure: no ClickHouse, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from typing import Iterable, Sequence

__all__ = [
    "AGING_BUCKETS", "Aging", "Allocation", "CreditNoteDoc", "InvoiceDoc", "InvoiceState", "PaymentDoc",
    "RefundDoc", "Statement", "StatementEntry", "WriteOffDoc", "aging", "allocate", "bucket_of", "invoice_states",
    "statement", "unapplied", "unapplied_with",
]

ZERO = Decimal("0.00")
AGING_BUCKETS = ("current", "d1_30", "d31_60", "d61_90", "d90_plus")
PAYMENT_STATES = ("unpaid", "partially_paid", "paid")


@dataclass(frozen=True)
class InvoiceDoc:
    """An issued (or voided) invoice as the account sees it."""

    number: str
    tenant: str
    period: str
    status: str  # issued | voided
    issued_on: date  # billing time zone
    due_on: date  # issued_on + the payment terms
    total: Decimal  # with VAT


@dataclass(frozen=True)
class Allocation:
    """An amount of one source (a payment or a credit note) on one invoice; negative: undone (a reversal)."""

    tenant: str
    invoice: str
    source_kind: str  # payment | credit_note
    source: str  # the payment's ref, the credit note's number
    amount: Decimal
    effective_on: date


@dataclass(frozen=True)
class WriteOffDoc:
    """Part of an invoice marked uncollectible on `written_on`; negative: recovered (source names the payment or note)."""

    tenant: str
    invoice: str
    amount: Decimal
    written_on: date
    source: str = ""


@dataclass(frozen=True)
class PaymentDoc:
    ref: str
    tenant: str
    amount: Decimal
    received_on: date
    method: str = "other"
    reversed_on: date | None = None  # the payment was reversed (bounced, mistaken) on that date


@dataclass(frozen=True)
class CreditNoteDoc:
    number: str
    tenant: str
    invoice: str
    issued_on: date
    total: Decimal  # with VAT, positive


@dataclass(frozen=True)
class RefundDoc:
    ref: str
    tenant: str
    credit_note: str  # the note whose credit was paid out
    amount: Decimal
    paid_on: date


@dataclass(frozen=True)
class InvoiceState:
    """What an invoice has been paid and still asks, as of a date; money in CNY with VAT."""

    number: str
    tenant: str
    total: Decimal
    due_on: date
    paid: Decimal
    credited: Decimal
    written_off: Decimal
    outstanding: Decimal
    days_past_due: int  # as of the date; ≤ 0 while not yet due

    @property
    def payment_state(self) -> str:
        """`paid` once payments cover what the invoice asks after its credit notes (a zero total, a fully
        credited invoice too: nothing is asked), `partially_paid` when payments cover part of it, else
        `unpaid` — a credit note is not a payment. A write-off does not pay either: a written-off invoice
        stays unpaid or partially paid, with nothing outstanding."""
        if self.paid >= self.total - self.credited:
            return "paid"
        return "partially_paid" if self.paid > 0 else "unpaid"

    @property
    def overdue(self) -> bool:
        """The due date has passed and something is outstanding."""
        return self.days_past_due > 0 and self.outstanding > 0

    @property
    def overpaid(self) -> Decimal:
        """What its allocations and write-offs count beyond its total on the date — possible only between a
        backdated payment and the later reversal of one that had paid the same invoice: credit the tenant
        held in that window (`unapplied_with` counts it), never an amount outstanding below zero."""
        return max(self.paid + self.credited + self.written_off - self.total, ZERO)


@dataclass(frozen=True)
class Aging:
    """One tenant's (or the total's, tenant '') receivables as of a date, by days past due."""

    tenant: str
    current: Decimal = ZERO
    d1_30: Decimal = ZERO
    d31_60: Decimal = ZERO
    d61_90: Decimal = ZERO
    d90_plus: Decimal = ZERO
    unapplied: Decimal = ZERO  # credit held, not in the buckets

    @property
    def outstanding(self) -> Decimal:
        return self.current + self.d1_30 + self.d31_60 + self.d61_90 + self.d90_plus

    def as_dict(self) -> dict[str, str]:
        return {"tenant": self.tenant, **{name: f"{getattr(self, name):.2f}" for name in AGING_BUCKETS},
                "outstanding": f"{self.outstanding:.2f}", "unapplied": f"{self.unapplied:.2f}"}


@dataclass(frozen=True)
class StatementEntry:
    """One line of a statement of account: `amount` adds to what the tenant owes (an invoice, a refund
    paid out, a reversed payment) or, negative, takes from it (a payment, a credit note, a write-off)."""

    on: date
    kind: str  # invoice | credit_note | payment | payment_reversed | refund | write_off | write_off_recovered
    document: str  # the invoice or credit note number, the payment or refund ref
    description: str
    amount: Decimal
    balance: Decimal  # the running balance after this entry


@dataclass(frozen=True)
class Statement:
    """对账单: what `tenant` owed before `start`, each movement from `start` to `end` (both included), what it owes after."""

    tenant: str
    start: date
    end: date
    opening: Decimal  # positive: the tenant owes; negative: it holds credit
    entries: tuple[StatementEntry, ...] = field(default=())
    closing: Decimal = ZERO


# --------------------------------------------------------------------------------- per invoice


def invoice_states(invoices: Iterable[InvoiceDoc], allocations: Iterable[Allocation],
                   write_offs: Iterable[WriteOffDoc], as_of: date) -> dict[str, InvoiceState]:
    """The state of every invoice issued on or before `as_of`, counting what had happened by then."""
    docs = {doc.number: doc for doc in invoices if doc.issued_on <= as_of}
    paid: dict[str, Decimal] = {}
    credited: dict[str, Decimal] = {}
    written: dict[str, Decimal] = {}
    for a in allocations:
        if a.invoice in docs and a.effective_on <= as_of:
            into = paid if a.source_kind == "payment" else credited
            into[a.invoice] = into.get(a.invoice, ZERO) + a.amount
    for w in write_offs:
        if w.invoice in docs and w.written_on <= as_of:
            written[w.invoice] = written.get(w.invoice, ZERO) + w.amount
    states = {}
    for number, doc in docs.items():
        p, c, w = paid.get(number, ZERO), credited.get(number, ZERO), written.get(number, ZERO)
        states[number] = InvoiceState(number, doc.tenant, doc.total, doc.due_on, p, c, w,
                                      max(doc.total - p - c - w, ZERO), (as_of - doc.due_on).days)
    return states


def unapplied_with(states: Iterable[InvoiceState], held: dict[str, Decimal]) -> dict[str, Decimal]:
    """`held` (from `unapplied`) plus what invoices counted beyond their totals on the date (InvoiceState.overpaid):
    then Σ outstanding − unapplied is a statement's closing balance on every day."""
    out = dict(held)
    for s in states:
        if s.overpaid:
            out[s.tenant] = out.get(s.tenant, ZERO) + s.overpaid
    return {tenant: amount for tenant, amount in out.items() if amount}


def unapplied(payments: Iterable[PaymentDoc], credit_notes: Iterable[CreditNoteDoc], refunds: Iterable[RefundDoc],
              allocations: Iterable[Allocation], as_of: date) -> dict[str, Decimal]:
    """Credit each tenant held on `as_of`: its payments received (not reversed by then) and credit notes
    issued, less what was allocated to invoices and refunded by then. Tenants with none are left out."""
    held: dict[str, Decimal] = {}

    def add(tenant: str, amount: Decimal) -> None:
        held[tenant] = held.get(tenant, ZERO) + amount

    for p in payments:
        if p.received_on <= as_of and not (p.reversed_on is not None and p.reversed_on <= as_of):
            add(p.tenant, p.amount)
    for n in credit_notes:
        if n.issued_on <= as_of:
            add(n.tenant, n.total)
    for a in allocations:
        if a.effective_on <= as_of:
            add(a.tenant, -a.amount)
    for r in refunds:
        if r.paid_on <= as_of:
            add(r.tenant, -r.amount)
    return {tenant: amount for tenant, amount in held.items() if amount}


# --------------------------------------------------------------------------------------- aging


def bucket_of(days_past_due: int) -> str:
    """The aging bucket of an amount `days_past_due` days past its due date (≤ 0: not yet due; edges inclusive)."""
    if days_past_due <= 0:
        return "current"
    if days_past_due <= 30:
        return "d1_30"
    if days_past_due <= 60:
        return "d31_60"
    if days_past_due <= 90:
        return "d61_90"
    return "d90_plus"


def aging(states: Iterable[InvoiceState], unapplied_by_tenant: dict[str, Decimal]) -> list[Aging]:
    """Per tenant (by id) its outstanding by bucket and the credit it holds; the total is `total_of` them."""
    buckets: dict[str, dict[str, Decimal]] = {}
    for s in states:
        if s.outstanding > 0:
            row = buckets.setdefault(s.tenant, {})
            name = bucket_of(s.days_past_due)
            row[name] = row.get(name, ZERO) + s.outstanding
    tenants = sorted(set(buckets) | set(unapplied_by_tenant))
    return [Aging(t, **buckets.get(t, {}), unapplied=unapplied_by_tenant.get(t, ZERO)) for t in tenants]


def total_of(rows: Sequence[Aging]) -> Aging:
    """The sum of `rows`, tenant ''."""
    return Aging("", **{name: sum((getattr(r, name) for r in rows), ZERO) for name in (*AGING_BUCKETS, "unapplied")})


# ----------------------------------------------------------------------------------- allocation


def allocate(outstanding: Sequence[tuple[str, Decimal]], amount: Decimal) -> list[tuple[str, Decimal]]:
    """`amount` spread over `outstanding` ((invoice, what it still asks), in the order to pay them:
    oldest due date first), each taking what it asks until the amount runs out; what is left is not
    allocated (the tenant's unapplied credit)."""
    out, left = [], amount
    for number, asks in outstanding:
        if left <= 0:
            break
        take = min(left, asks)
        if take > 0:
            out.append((number, take))
            left -= take
    return out


# ------------------------------------------------------------------------------------ statement


def statement(tenant: str, start: date, end: date, *, invoices: Iterable[InvoiceDoc], payments: Iterable[PaymentDoc],
              credit_notes: Iterable[CreditNoteDoc], refunds: Iterable[RefundDoc],
              write_offs: Iterable[WriteOffDoc]) -> Statement:
    """`tenant`'s statement of account from `start` to `end` (both included, billing time zone).

    The balance is what the tenant owes: + invoices, refunds paid out and reversed payments;
    − payments, credit notes and write-offs (a recovery, a negative write-off, adds back).
    Opening: the sum of everything before `start`; closing: opening + the entries. Entries are in
    date order, then invoices before what settles them (kind order below), then by document."""
    movements: list[tuple[date, int, str, str, str, Decimal]] = []
    for i in invoices:
        if i.tenant == tenant:
            movements.append((i.issued_on, 0, "invoice", i.number, f"invoice {i.number} ({i.period})", i.total))
    for n in credit_notes:
        if n.tenant == tenant:
            movements.append((n.issued_on, 1, "credit_note", n.number, f"credit note {n.number} on {n.invoice}", -n.total))
    for p in payments:
        if p.tenant == tenant:
            movements.append((p.received_on, 2, "payment", p.ref, f"payment {p.ref} ({p.method})", -p.amount))
            if p.reversed_on is not None:
                movements.append((p.reversed_on, 3, "payment_reversed", p.ref, f"payment {p.ref} reversed", p.amount))
    for r in refunds:
        if r.tenant == tenant:
            movements.append((r.paid_on, 4, "refund", r.ref, f"refund {r.ref} of credit note {r.credit_note}", r.amount))
    for w in write_offs:
        if w.tenant == tenant:
            kind = "write_off" if w.amount > 0 else "write_off_recovered"
            what = f"{w.invoice} written off" if w.amount > 0 else f"{w.invoice} write-off recovered by {w.source}"
            movements.append((w.written_on, 5, kind, w.invoice, what, -w.amount))
    movements.sort(key=lambda m: (m[0], m[1], m[3]))
    opening = sum((m[5] for m in movements if m[0] < start), ZERO)
    running, entries = opening, []
    for on, _, kind, document, description, amount in movements:
        if start <= on <= end:
            running += amount
            entries.append(StatementEntry(on, kind, document, description, amount, running))
    return Statement(tenant, start, end, opening, tuple(entries), running)
