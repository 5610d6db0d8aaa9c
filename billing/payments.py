"""Payments, their allocations, reversals, credit applied and write-offs (issue 38): facts on the books.

    record_payment(db, rules, tenant, amount, ref, received_on, ...) -> (Payment, bool)   idempotent by ref
    record_payments(db, rules, [Receipt]) -> [(Payment, bool)]   several under one lease, one append (an import)
    reverse_payment(db, rules, ref, reason, ...) -> Payment
    apply_credit(db, rules, tenant, ...) -> [(invoice, amount)]
    write_off(db, rules, number, reason, ...) -> Decimal
    payments(db, tenant=None) / find_payment(db, ref, tenant=None) -> Payment
    credit_note_effects(db, rules, invoice, total, issued_on, ...)   what a credit note does to the account

Every write holds the invoicing lease (billing/invoice_lock.py), like invoices and credit notes:
what is outstanding is read and allocated by one writer at a time, so two payments never both
take the same fen. The state of an invoice is never stored: billing_rules/accounts.py derives it.

A payment is allocated to the invoices named (`--invoice N` takes what N still asks, or what is
left of the payment; `--invoice N=AMOUNT` exactly that, refused above what N still asks), else
to the tenant's issued invoices with something outstanding, oldest due date first; the rest is
the tenant's unapplied credit, spent on its next issued invoices (billing/invoicing.py) or by
`apply_credit`. A named invoice that was written off takes a payment up to what it still asks
before the write-off; the part beyond what was outstanding is a recovery (a negative write-off).

    BillingError
    └── PaymentRefused      what was asked cannot be recorded as asked; nothing was written
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, Callable, Sequence

from billing import books
from billing import invoice_store as store
from billing.accounts import FAR, CreditPool, Ledger, allocation_id, invoice_position, ledger, outstanding_of, today
from billing.errors import BillingError, NotFound
from billing.invoice_lock import invoicing_lease
from billing.journal import actor_here, entry
from billing.tenants import check_tenant_id, checked_text, find_tenant, shown_value
from billing_rules.accounts import Allocation, PaymentDoc, WriteOffDoc, allocate
from schemas.books import (
    AllocationRow, CreditApplied, InvoiceWrittenOff, PaymentRecorded, PaymentReversalRow, PaymentReversed, PaymentRow,
    RefundRow, WriteOffRow,
)
from schemas.ids import is_id

__all__ = ["METHODS", "Payment", "PaymentRefused", "Receipt", "apply_credit", "check_received", "check_text",
           "credit_note_effects", "find_payment", "parse_invoice_arg", "payments", "receipt", "record_payment",
           "record_payments", "reverse_payment", "write_off"]

METHODS = ("bank", "alipay", "wechat", "card", "other")
SOURCES = ("manual", "bank_import", "top_up")
MAX_TEXT = 500
_INVOICE_ARG = re.compile(r"(GB-[0-9]{4}-[0-9]{6})(?:=(.*))?", flags=re.ASCII)


class PaymentRefused(BillingError):
    """A payment, reversal, application of credit or write-off that cannot be made as asked; nothing was written."""


@dataclass(frozen=True)
class Payment:
    """A payment as recorded, with where it went."""

    ref: str
    tenant: str
    amount: Decimal
    method: str
    received_on: date
    source: str
    note: str
    bank_txn: str
    payer: str
    remittance: str
    recorded_at: datetime
    allocations: tuple[tuple[str, Decimal], ...]  # (invoice, net amount), by invoice
    reversed_on: date | None = None
    reversal_reason: str = ""

    @property
    def unapplied(self) -> Decimal:
        """What of it is held as credit (0 once reversed)."""
        if self.reversed_on is not None:
            return Decimal("0.00")
        return self.amount - sum((a for _, a in self.allocations), Decimal("0.00"))

    def as_dict(self) -> dict:
        return {"ref": self.ref, "tenant": self.tenant, "amount": f"{self.amount:.2f}", "method": self.method,
                "received_on": str(self.received_on), "source": self.source, "note": self.note,
                "bank_txn": self.bank_txn, "payer": self.payer, "remittance": self.remittance,
                "recorded_at": self.recorded_at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                "allocations": [{"invoice": n, "amount": f"{a:.2f}"} for n, a in self.allocations],
                "unapplied": f"{self.unapplied:.2f}",
                "reversed_on": str(self.reversed_on) if self.reversed_on else None,
                "reversal_reason": self.reversal_reason}


# ------------------------------------------------------------------------------------- checks


def _amount(value: object, what: str = "amount") -> Decimal:
    from billing.balances import InvalidAmount, parse_amount  # the one parser of amounts

    try:
        return parse_amount(value, what)
    except InvalidAmount as exc:
        raise PaymentRefused(str(exc)) from None


def _ref(value: object) -> str:
    if not is_id(value):
        shown = shown_value(value) if isinstance(value, str) else type(value).__name__
        raise PaymentRefused(f"ref {shown} is not an id: an ASCII letter or digit, then up to 63 letters, digits, "
                             "'.', '_' or '-' (the payment's own reference, such as pay-2026-0001)")
    return value  # type: ignore[return-value]


def check_text(value: str, what: str) -> str:
    """A note, payer, remittance or reason as stored: NFC, trimmed, at most MAX_TEXT characters, no
    control or invisible formatting character; PaymentRefused (one line, naming `what`) if not."""
    try:
        return checked_text(what, value or "", MAX_TEXT, empty_ok=True)
    except BillingError as exc:
        raise PaymentRefused(str(exc)) from None



def check_received(value: object, rules: Any, now: datetime | None = None) -> date:
    """A received date: YYYY-MM-DD, a real date, not after today in the billing time zone."""
    if isinstance(value, date):
        received = value
    else:
        text = value if isinstance(value, str) else ""
        if not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", text, flags=re.ASCII):
            raise PaymentRefused(f"--received {shown_value(str(value))} is not a date YYYY-MM-DD")
        try:
            received = date.fromisoformat(text)
        except ValueError:
            raise PaymentRefused(f"--received {text} is not a date of the calendar") from None
    if received > today(rules, now):
        raise PaymentRefused(f"--received {received} is after today ({today(rules, now)} in {rules.billing_tz}): "
                             "a payment is recorded once it is received")
    if received.year < 2000:
        raise PaymentRefused(f"--received {received} is before 2000: a typo?")
    return received


def parse_invoice_arg(text: str) -> tuple[str, Decimal | None]:
    """`--invoice N` or `--invoice N=AMOUNT` as (number, amount or None); refused in one line."""
    match = _INVOICE_ARG.fullmatch(text or "")
    if not match:
        raise PaymentRefused(f"--invoice {shown_value(text)} is not an invoice number GB-YYYY-NNNNNN, "
                             "optionally =AMOUNT")
    return match[1], (None if match[2] is None else _amount(match[2], f"--invoice {match[1]} amount"))


def _registered(db: Any, tenant: str) -> str:
    try:
        tenant = check_tenant_id(tenant)
    except BillingError as exc:
        raise PaymentRefused(str(exc)) from None
    if find_tenant(db, tenant) is None:
        raise PaymentRefused(f"tenant {tenant} is not registered; register it with `gpubill tenant add {tenant} --name "
                             "NAME`")
    return tenant


# ------------------------------------------------------------------------------------ writing


def _targets(account: Ledger, tenant: str, named: Sequence[tuple[str, Decimal | None]], amount: Decimal,
             ) -> list[tuple[str, Decimal, Decimal]]:
    """(invoice, amount, of which recovers a write-off) of a payment of `amount`: to `named`, else oldest due first."""
    states = account.states(FAR)
    docs = {d.number: d for d in account.invoices}
    if not named:
        return [(n, a, Decimal(0)) for n, a in allocate(outstanding_of(states.values(), account.invoices), amount)]
    out, left, seen = [], amount, set()
    for number, asked in named:
        if number in seen:
            raise PaymentRefused(f"--invoice {number} is named twice")
        seen.add(number)
        doc = docs.get(number)
        if doc is None or doc.tenant != tenant:
            raise PaymentRefused(f"{number} is not an issued invoice of {tenant}; `gpubill invoice list --tenant "
                                 f"{tenant}` lists them")
        if doc.status != "issued":
            raise PaymentRefused(f"{number} is {doc.status}: a payment goes to an issued invoice (its replacement, "
                                 "once issued)")
        state = states[number]
        reaches = state.outstanding + max(state.written_off, Decimal(0))  # what it asks before its write-off
        take = min(left, reaches) if asked is None else asked
        if asked is not None and asked > reaches:
            raise PaymentRefused(f"{number} asks {reaches:.2f} more, the payment gives it {asked:.2f}: an allocation "
                                 "above what is outstanding")
        if take > left:
            raise PaymentRefused(f"the allocations add up to more than the payment ({amount:.2f})")
        if take > 0:
            out.append((number, take, max(take - state.outstanding, Decimal(0))))
            left -= take
    return out


def _rows(tenant: str, targets: list[tuple[str, Decimal, Decimal]], *, kind: str, source: str, source_on: date,
          issued_on: dict[str, date], reason: str, at: datetime, written_on: date, actor: str,
          ) -> tuple[tuple[AllocationRow, ...], tuple[WriteOffRow, ...]]:
    fact_id = allocation_id()
    allocations = tuple(AllocationRow(id=f"{fact_id}-{no}", tenant=tenant, invoice=number, source_kind=kind,
                                      source=source, amount=amount, effective_on=max(source_on, issued_on[number]),
                                      reason=reason, recorded_at=at)
                        for no, (number, amount, _) in enumerate(targets, start=1))
    recoveries = tuple(WriteOffRow(id=f"{fact_id}-w{no}", tenant=tenant, invoice=number, amount=-recovered,
                                   reason=f"recovered by {source}", source=source,
                                   written_on=max(source_on, issued_on[number]), actor=actor, recorded_at=at)
                       for no, (number, _, recovered) in enumerate(targets, start=1) if recovered > 0)
    return allocations, recoveries


@dataclass(frozen=True)
class Receipt:
    """A payment to record, its fields checked (`receipt` makes one): record_payments' input."""

    tenant: str
    amount: Decimal
    ref: str
    received_on: date
    method: str = "bank"
    invoices: tuple[tuple[str, Decimal | None], ...] = ()  # (number, amount or None: what it still asks)
    note: str = ""
    source: str = "manual"
    bank_txn: str = ""
    payer: str = ""
    remittance: str = ""

    def same_as(self, payment: "Payment") -> bool:
        """The recorded `payment` is this one: same tenant, amount, date, method and bank fields (the
        note and the named invoices are not compared: a re-run changes nothing, whatever they say)."""
        return (payment.tenant, payment.amount, payment.received_on, payment.method, payment.bank_txn,
                payment.payer, payment.remittance) == (self.tenant, self.amount, self.received_on, self.method,
                                                       self.bank_txn, self.payer, self.remittance)


def receipt(db: Any, rules: Any, tenant: str, amount: Decimal | str, ref: str, received_on: date | str, *,
            method: str = "bank", invoices: Sequence[tuple[str, Decimal | None]] = (), note: str = "",
            source: str = "manual", bank_txn: str = "", payer: str = "", remittance: str = "",
            now: datetime | None = None) -> Receipt:
    """record_payment's arguments checked (PaymentRefused, one line, for the first that is wrong);
    reads only whether `tenant` is registered."""
    amount, ref = _amount(amount), _ref(ref)
    if method not in METHODS:
        raise PaymentRefused(f"--method {shown_value(method)} is not one of {', '.join(METHODS)}")
    if source not in SOURCES:
        raise ValueError(f"payment source {source!r}")
    received_on = check_received(received_on, rules, now)
    note, payer, remittance = check_text(note, "--note"), check_text(payer, "payer"), check_text(remittance, "remittance")
    return Receipt(_registered(db, tenant), amount, ref, received_on, method, tuple(invoices), note, source,
                   bank_txn, payer, remittance)


def record_payment(db: Any, rules: Any, tenant: str, amount: Decimal | str, ref: str, received_on: date | str, *,
                   method: str = "bank", invoices: Sequence[tuple[str, Decimal | None]] = (), note: str = "",
                   source: str = "manual", bank_txn: str = "", payer: str = "", remittance: str = "",
                   actor: str | None = None, now: datetime | None = None,
                   on_wait: Callable[[str], None] | None = None, top_up: Any = None) -> tuple[Payment, bool]:
    """Record a payment of `amount` CNY received from `tenant` on `received_on`, allocated as the module
    docstring says; returns (the payment, whether this call recorded it). Idempotent by `ref`: the same
    ref with the same tenant, amount, date and method (and bank fields) changes nothing; with other
    content it is refused. `top_up` (billing/balances.py): the top-up row recorded with it, as one fact."""
    asked = receipt(db, rules, tenant, amount, ref, received_on, method=method, invoices=invoices, note=note,
                    source=source, bank_txn=bank_txn, payer=payer, remittance=remittance, now=now)
    return record_payments(db, rules, [asked], actor=actor, now=now, on_wait=on_wait, top_up=top_up)[0]


def record_payments(db: Any, rules: Any, receipts: Sequence[Receipt], *, actor: str | None = None,
                    now: datetime | None = None, on_wait: Callable[[str], None] | None = None,
                    top_up: Any = None) -> list[tuple[Payment, bool]]:
    """Record `receipts` (`receipt` checked them) in their order under one invoicing lease, appended
    together — all or none; returns (the payment, whether this call recorded it) for each. Each is
    allocated as record_payment's would be after the ones before it. Idempotent by ref, each: one
    already recorded with the same content is returned as it is; with other content — or a ref
    given twice — nothing at all is written (PaymentRefused)."""
    refs = [r.ref for r in receipts]
    twice = sorted({ref for ref in refs if refs.count(ref) > 1})
    if twice:
        raise PaymentRefused(f"ref {twice[0]} is given twice; nothing was written")
    if top_up is not None and len(receipts) != 1:
        raise ValueError("a top-up is one payment")
    actor = actor or actor_here()
    with invoicing_lease(db, on_wait=on_wait) as fence:
        existing = {p.ref: p for p in payments(db, refs=refs)} if refs else {}
        for r in receipts:
            recorded = existing.get(r.ref)
            if recorded is not None and not r.same_as(recorded):
                bank = f" (bank transaction {recorded.bank_txn})" if recorded.bank_txn else ""
                raise PaymentRefused(f"ref {r.ref} is already recorded{bank} as {recorded.amount:.2f} CNY from "
                                     f"{recorded.tenant} received {recorded.received_on} by {recorded.method}"
                                     f"{_other_fields(recorded, r)}; nothing was written (give the payment's own "
                                     "reference)")
        at = (now or datetime.now(UTC)).astimezone(UTC)
        accounts: dict[str, Ledger] = {}
        facts = []
        for r in receipts:
            if r.ref not in existing:
                if r.tenant not in accounts:
                    accounts[r.tenant] = ledger(db, rules, r.tenant)
                facts.append(_payment_fact(accounts[r.tenant], r, at=at, actor=actor, top_up=top_up))
        if facts:
            fence()
            books.record(db, *facts)
        found = {p.ref: p for p in payments(db, refs=[r.ref for r in receipts if r.ref not in existing])} \
            if facts else {}
        return [(existing[r.ref], False) if r.ref in existing else (found[r.ref], True) for r in receipts]


def _other_fields(recorded: Payment, asked: Receipt) -> str:
    """Which bank fields differ when the headline ones are the same (else nothing to add)."""
    if (recorded.tenant, recorded.amount, recorded.received_on, recorded.method) != (
            asked.tenant, asked.amount, asked.received_on, asked.method):
        return ""
    differ = [name for name in ("bank_txn", "payer", "remittance") if getattr(recorded, name) != getattr(asked, name)]
    return f" with another {' and '.join(differ)}"


def _payment_fact(account: Ledger, r: Receipt, *, at: datetime, actor: str, top_up: Any = None) -> Any:
    """The fact of payment `r` on `account` — which it then holds too, so that the next payment of the
    same call allocates after this one (the projection sees the facts only once they are recorded)."""
    targets = _targets(account, r.tenant, r.invoices, r.amount)
    allocations, recoveries = _rows(r.tenant, targets, kind="payment", source=r.ref, source_on=r.received_on,
                                    issued_on={d.number: d.issued_on for d in account.invoices}, reason="payment",
                                    at=at, written_on=r.received_on, actor=actor)
    row = PaymentRow(ref=r.ref, tenant=r.tenant, amount=r.amount, method=r.method, received_on=r.received_on,
                     source=r.source, bank_txn=r.bank_txn, payer=r.payer, remittance=r.remittance, note=r.note,
                     actor=actor, recorded_at=at)
    account.payments.append(PaymentDoc(r.ref, r.tenant, r.amount, r.received_on, r.method))
    account.allocations += [Allocation(a.tenant, a.invoice, a.source_kind, a.source, a.amount, a.effective_on)
                            for a in allocations]
    account.write_offs += [WriteOffDoc(w.tenant, w.invoice, w.amount, w.written_on, w.source) for w in recoveries]
    if top_up is not None:
        from schemas.books import TopUpRecorded

        return TopUpRecorded(kind="top_up", top_up=top_up, payment=row, allocations=allocations, write_offs=recoveries)
    return PaymentRecorded(kind="payment_recorded", payment=row, allocations=allocations, write_offs=recoveries)


def reverse_payment(db: Any, rules: Any, ref: str, reason: str, *, actor: str | None = None,
                    now: datetime | None = None, on_wait: Callable[[str], None] | None = None) -> Payment:
    """Reverse payment `ref` (bounced, mistaken): every allocation and write-off recovery it made is undone
    by a negative one, dated today; the invoices it paid are outstanding again. Refused for an unknown
    or already reversed payment, or without a reason."""
    ref, reason = _ref(ref), check_text(reason, "--reason")
    if not reason:
        raise PaymentRefused("--reason is required: say why the payment is reversed (bounced, recorded by mistake)")
    actor = actor or actor_here()
    with invoicing_lease(db, on_wait=on_wait) as fence:
        payment = _found(db, ref)
        if payment is None:
            raise PaymentRefused(f"no payment {ref}; `gpubill payment list` shows them")
        if payment.reversed_on is not None:
            raise PaymentRefused(f"payment {ref} was already reversed on {payment.reversed_on}")
        on = today(rules, now)
        at = (now or datetime.now(UTC)).astimezone(UTC)
        fact_id = allocation_id()
        undone = tuple(AllocationRow(id=f"{fact_id}-{no}", tenant=payment.tenant, invoice=number, source_kind="payment",
                                     source=ref, amount=-amount, effective_on=on, reason="reversal", recorded_at=at)
                       for no, (number, amount) in enumerate(payment.allocations, start=1) if amount)
        recovered = db.query("SELECT invoice, sum(amount) FROM write_offs FINAL WHERE source = {r:String} "
                             "AND tenant = {t:String} GROUP BY invoice ORDER BY invoice",
                             {"r": ref, "t": payment.tenant})
        reinstated = tuple(WriteOffRow(id=f"{fact_id}-w{no}", tenant=payment.tenant, invoice=invoice,
                                       amount=-Decimal(amount), reason=f"payment {ref} reversed", source=ref,
                                       written_on=on, actor=actor, recorded_at=at)
                           for no, (invoice, amount) in enumerate(recovered, start=1) if Decimal(amount))
        fence()
        books.record(db, PaymentReversed(
            kind="payment_reversed", allocations=undone, write_offs=reinstated,
            reversal=PaymentReversalRow(ref=ref, tenant=payment.tenant, amount=payment.amount, reason=reason,
                                        reversed_on=on, actor=actor, recorded_at=at)))
        return find_payment(db, ref)


def apply_credit(db: Any, rules: Any, tenant: str, *, invoices: Sequence[str] = (), actor: str | None = None,
                 now: datetime | None = None, on_wait: Callable[[str], None] | None = None) -> list[tuple[str, Decimal]]:
    """Spend `tenant`'s unapplied credit (oldest source first) on its outstanding invoices (`invoices`, in
    that order, else oldest due date first); returns (invoice, amount) of each allocation, none when
    there is no credit or nothing outstanding."""
    tenant = _registered(db, tenant)
    actor = actor or actor_here()
    with invoicing_lease(db, on_wait=on_wait) as fence:
        account = ledger(db, rules, tenant)
        states = account.states(FAR)
        docs = {d.number: d for d in account.invoices}
        for number in invoices:
            if number not in docs or docs[number].status != "issued":
                raise PaymentRefused(f"{number} is not an issued invoice of {tenant}")
        order = outstanding_of(states.values(), account.invoices)
        if invoices:
            order = [(n, states[n].outstanding) for n in invoices if states[n].outstanding > 0]
        pool = CreditPool(db, rules, tenant)
        at = (now or datetime.now(UTC)).astimezone(UTC)
        fact_id, rows = allocation_id(), []
        for number, asks in order:
            rows += pool.spend(tenant, number, docs[number].issued_on, asks, reason="apply", fact_id=fact_id,
                               recorded_at=at, first_no=len(rows) + 1)
        if not rows:
            return []
        fence()
        books.record(db, CreditApplied(kind="credit_applied", tenant=tenant, allocations=tuple(rows)))
        return [(row.invoice, row.amount) for row in rows]


def write_off(db: Any, rules: Any, number: str, reason: str, *, actor: str | None = None, now: datetime | None = None,
              on_wait: Callable[[str], None] | None = None) -> Decimal:
    """Mark what remains of issued invoice `number` uncollectible (a fact, dated today); returns the amount.
    A later payment named to it still counts: it recovers the write-off. Refused for a draft, a voided
    invoice, one with nothing outstanding, or without a reason."""
    reason = check_text(reason, "--reason")
    if not reason:
        raise PaymentRefused("--reason is required: say why the invoice is written off")
    actor = actor or actor_here()
    with invoicing_lease(db, on_wait=on_wait) as fence:
        try:
            invoice = store.find(db, number)
        except NotFound:
            raise PaymentRefused(f"no invoice {shown_value(number)}; `gpubill invoice list` shows the numbers") from None
        if invoice.status != "issued":
            raise PaymentRefused(f"{invoice.number or invoice.id} is {invoice.status}: only an issued invoice is written off")
        state = invoice_position(db, rules, invoice)[0]
        if state.outstanding <= 0:
            raise PaymentRefused(f"{invoice.number} has nothing outstanding to write off")
        on = today(rules, now)
        at = (now or datetime.now(UTC)).astimezone(UTC)
        fence()
        books.record(db, InvoiceWrittenOff(
            kind="invoice_written_off",
            write_off=WriteOffRow(id=f"{allocation_id()}-w", tenant=invoice.tenant, invoice=invoice.number,
                                  amount=state.outstanding, reason=reason, source="", written_on=on, actor=actor,
                                  recorded_at=at),
            journal=(entry("written_off", invoice=invoice.number, tenant=invoice.tenant, period=invoice.period,
                           actor=actor, reason=reason, detail=f"{state.outstanding:.2f} {store.CURRENCY} uncollectible"),)))
        return state.outstanding


def credit_note_effects(db: Any, rules: Any, invoice: Any, number: str, total: Decimal, issued_on: date, *,
                        refund_ref: str | None, at: datetime, actor: str,
                        ) -> tuple[tuple[AllocationRow, ...], tuple[WriteOffRow, ...], RefundRow | None]:
    """What credit note `number` of `total` on `invoice` does to the account: an allocation to the
    invoice of what it still asks (a recovery of its write-off beyond what was outstanding), and the
    rest held as credit or, with `refund_ref`, a refund paid out of band of exactly that rest —
    never both. Refused (nothing written) for a refund when nothing is left beyond the invoice, or a
    refund ref already used. Call it holding the invoicing lease."""
    state, invoice_on = invoice_position(db, rules, invoice)
    outstanding, written = state.outstanding, state.written_off
    reaches = outstanding + max(written, Decimal(0))  # what it asks before its write-off
    take = min(total, reaches)
    targets = [(invoice.number, take, max(take - outstanding, Decimal(0)))] if take > 0 else []
    allocations, recoveries = _rows(invoice.tenant, targets, kind="credit_note", source=number, source_on=issued_on,
                                    issued_on={invoice.number: invoice_on}, reason="credit_note",
                                    at=at, written_on=issued_on, actor=actor)
    beyond = total - take
    if refund_ref is None:
        return allocations, recoveries, None
    refund_ref = _ref(refund_ref)
    if beyond <= 0:
        raise PaymentRefused(f"nothing to refund: the credit note's {total:.2f} goes to what {invoice.number} still asks "
                             f"({reaches:.2f}); without --refund it reduces it")
    if db.query("SELECT count() FROM refunds FINAL WHERE ref = {r:String}", {"r": refund_ref})[0][0]:
        raise PaymentRefused(f"refund ref {refund_ref} is already recorded; give the refund's own reference")
    refund = RefundRow(ref=refund_ref, tenant=invoice.tenant, credit_note=number, amount=beyond, paid_on=issued_on,
                       note=f"credit note {number} beyond what {invoice.number} asked", actor=actor, recorded_at=at)
    return allocations, recoveries, refund


# ------------------------------------------------------------------------------------ reading

_COLUMNS = ("ref", "tenant", "amount", "method", "received_on", "source", "note", "bank_txn", "payer", "remittance",
            "recorded_at")


def payments(db: Any, *, tenant: str | None = None, ref: str | None = None,
             refs: Sequence[str] | None = None) -> list[Payment]:
    """Payments (of `tenant`; the one `ref`; those of `refs`), by date received then ref, with their
    allocations and reversal."""
    where, params = ["1"], {}
    if refs is not None:
        where.append("ref IN {refs:Array(String)}")
        params["refs"] = list(refs)
    if tenant is not None:
        where.append("tenant = {t:String}")
        params["t"] = tenant
    if ref is not None:
        where.append("ref = {r:String}")
        params["r"] = ref
    rows = db.query(f"SELECT {', '.join(_COLUMNS)} FROM payments FINAL WHERE {' AND '.join(where)} "
                    "ORDER BY received_on, ref", params)
    if not rows:
        return []
    refs = [row[0] for row in rows]
    allocated: dict[str, list[tuple[str, Decimal]]] = {}
    for source, invoice, amount in db.query(
            "SELECT source, invoice, sum(amount) FROM allocations FINAL WHERE source_kind = 'payment' "
            "AND source IN {refs:Array(String)} GROUP BY source, invoice ORDER BY source, invoice", {"refs": refs}):
        if Decimal(amount):
            allocated.setdefault(source, []).append((invoice, Decimal(amount)))
    reversals = {r: (on, why) for r, on, why in db.query(
        "SELECT ref, reversed_on, reason FROM payment_reversals FINAL WHERE ref IN {refs:Array(String)}", {"refs": refs})}
    out = []
    for row in rows:
        fields = dict(zip(_COLUMNS, row, strict=True))
        at = fields["recorded_at"]
        fields["recorded_at"] = at.replace(tzinfo=UTC) if at.tzinfo is None else at
        fields["amount"] = Decimal(fields["amount"])
        on, why = reversals.get(fields["ref"], (None, ""))
        out.append(Payment(**fields, allocations=tuple(allocated.get(fields["ref"], ())), reversed_on=on,
                           reversal_reason=why))
    return out


def _found(db: Any, ref: str) -> Payment | None:
    found = payments(db, ref=ref)
    return found[0] if found else None


def find_payment(db: Any, ref: str, *, tenant: str | None = None) -> Payment:
    """Payment `ref` (of `tenant` when given); NotFound without one."""
    found = payments(db, ref=ref, tenant=tenant)
    if not found:
        raise NotFound(f"no payment {ref!r}" + (f" of tenant {tenant!r}" if tenant is not None else ""))
    return found[0]
