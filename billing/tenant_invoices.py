"""A tenant's invoices, credit notes and payments, as its API and web page read them: the lists
across periods, what it owes, and the period of one of its invoice numbers. Always filtered by the
tenant, so another tenant's number reads as no invoice; drafts are the operator's and never shown.

    tenant_invoices(db, tenant, rules=None, now=None) -> [dict]   with how each is paid (issue 38)
    tenant_credit_notes(db, tenant) -> [dict]
    tenant_payments(db, tenant) -> [dict]
    tenant_account(db, rules, tenant, now=None) -> Account        outstanding, past due, credit held
    invoice_period(db, tenant, number) -> str | None

How an invoice is paid is derived (billing/accounts.py, billing_rules/accounts.py) as of today in
the billing time zone: the payments, credit notes and write-offs allocated to it — never stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from billing import invoice_store as store
from billing.accounts import ledger, today
from billing.credit_notes import credit_notes

__all__ = ["Account", "invoice_period", "tenant_account", "tenant_credit_notes", "tenant_invoices", "tenant_payments"]

_MONEY = ("subtotal", "credit_used", "net", "tax", "total")
_ZERO = Decimal("0.00")


@dataclass(frozen=True)
class Account:
    """What a tenant owes and holds as of `as_of` (billing time zone); CNY with VAT."""

    as_of: Any  # date
    outstanding: Decimal  # what its issued invoices still ask
    past_due: Decimal  # the part of it past its due dates
    unapplied: Decimal  # credit held: payments and credit notes not allocated, less refunds


def tenant_invoices(db: Any, tenant: str, rules: Any = None, *, now: datetime | None = None) -> list[dict]:
    """The issued and voided invoices of `tenant`, newest period first; money as strings with two
    decimals. Each says its `status`, the invoice it `replaces` and the one it was `replaced_by`
    ("" for none) and its `credit_notes` (numbers). With `rules`, each also says how it is paid as
    of `now`'s date in the billing time zone (default: the clock): `issue_date`, `due_date` (null
    for a voided invoice), `prepaid` (the tenant has top-ups), `paid`, `credited`, `written_off`,
    `outstanding` (total less the three), `payment_state` (unpaid, partially_paid, paid), `overdue`
    (past its due date with something outstanding); and, as before issue 38, `amount_due` — now
    what is outstanding — and `settled` (nothing is). A voided invoice asks for nothing: outstanding
    0.00, never overdue."""
    found = store.headers(db, tenant=tenant, status=("issued", "voided"))
    replaced_by = {h.replaces: h.number for h in found if h.replaces}
    notes: dict[str, list[str]] = {}
    for note in credit_notes(db, tenant=tenant):
        notes.setdefault(note.invoice, []).append(note.number)
    out = []
    for header in sorted(found, key=lambda h: (h.period, h.number), reverse=True):
        out.append({
            "number": header.number, "period": header.period, "status": header.status,
            "issued_at": header.issued_at, "currency": header.currency,
            **{name: f"{getattr(header, name):.2f}" for name in _MONEY},
            "replaces": header.replaces, "replaced_by": replaced_by.get(header.number, ""),
            "credit_notes": notes.get(header.number, []),
        })
    if rules is not None and out:
        _payment_fields(db, rules, tenant, out, now)
    return out


def _payment_fields(db: Any, rules: Any, tenant: str, rows: list[dict], now: datetime | None) -> None:
    """Add to each invoice row how it is paid (tenant_invoices' docstring), from one read of the account."""
    from billing.balances import has_top_ups

    account = ledger(db, rules, tenant)
    docs = {doc.number: doc for doc in account.invoices}
    as_of = today(rules, now)
    states = account.states(as_of)
    prepaid = has_top_ups(db, tenant)
    for row in rows:
        doc = docs[row["number"]]
        # an invoice issued after the clock's date (a clock behind the issuer's) is shown as of its issue
        state = states.get(doc.number) or account.states(doc.issued_on)[doc.number]
        issued = doc.status == "issued"
        outstanding = state.outstanding if issued else _ZERO
        row.update(issue_date=str(doc.issued_on), prepaid=prepaid, due_date=str(doc.due_on) if issued else None,
                   paid=f"{state.paid:.2f}", credited=f"{state.credited:.2f}", written_off=f"{state.written_off:.2f}",
                   outstanding=f"{outstanding:.2f}", payment_state=state.payment_state,
                   overdue=issued and state.overdue, amount_due=f"{outstanding:.2f}", settled=not outstanding)


def tenant_account(db: Any, rules: Any, tenant: str, *, now: datetime | None = None) -> Account:
    """What `tenant` owes on its issued invoices as of `now`'s date in the billing time zone (default:
    the clock), the part of it past due, and the credit it holds."""
    account = ledger(db, rules, tenant)
    as_of = today(rules, now)
    issued = {doc.number for doc in account.invoices if doc.status == "issued"}
    states = [s for s in account.states(as_of).values() if s.number in issued]
    return Account(as_of, sum((s.outstanding for s in states), _ZERO),
                   sum((s.outstanding for s in states if s.overdue), _ZERO),
                   account.unapplied(as_of).get(tenant, _ZERO))


def tenant_payments(db: Any, tenant: str) -> list[dict]:
    """The payments of `tenant` (its top-ups too), newest first: ref, amount, currency, method,
    received_on, the allocations by invoice (net of a reversal), what is held unapplied, and
    reversed_on (None while it stands). Money as strings with two decimals. The operator's note,
    the bank's transaction id and who recorded it are not the tenant's to read and are left out."""
    from billing.payments import payments

    return [{"ref": p.ref, "amount": f"{p.amount:.2f}", "currency": store.CURRENCY, "method": p.method,
             "received_on": str(p.received_on),
             "allocations": [{"invoice": number, "amount": f"{amount:.2f}"} for number, amount in p.allocations],
             "unapplied": f"{p.unapplied:.2f}", "reversed_on": str(p.reversed_on) if p.reversed_on else None}
            for p in reversed(payments(db, tenant=tenant))]


def tenant_credit_notes(db: Any, tenant: str) -> list[dict]:
    """The credit notes of `tenant`, newest first; money as strings with two decimals."""
    return [{
        "number": note.number, "invoice": note.invoice, "period": note.period, "reason": note.reason,
        "issued_at": note.issued_at, "currency": note.currency,
        "subtotal": f"{note.subtotal:.2f}", "tax": f"{note.tax:.2f}", "total": f"{note.total:.2f}",
    } for note in reversed(credit_notes(db, tenant=tenant))]


def invoice_period(db: Any, tenant: str, number: str) -> str | None:
    """The period of invoice `number` when it is `tenant`'s and issued (or voided), else None."""
    rows = db.query("SELECT period FROM invoices FINAL WHERE tenant = {t:String} AND number = {n:String} "
                    "AND status != 'draft' LIMIT 1", {"t": tenant, "n": number})
    return str(rows[0][0]) if rows else None
