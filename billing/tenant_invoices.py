"""A tenant's invoices and credit notes, as its API and web page read them: the lists across
periods, and the period of one of its invoice numbers. Always filtered by the tenant, so another
tenant's number reads as no invoice; drafts are the operator's and never shown."""

from __future__ import annotations

from decimal import Decimal
from types import SimpleNamespace
from typing import Any

from billing import invoice_store as store
from billing.credit_notes import credit_notes
from billing.settlement import settlement_of

__all__ = ["invoice_period", "tenant_credit_notes", "tenant_invoices"]

_MONEY = ("subtotal", "credit_used", "net", "tax", "total")


def tenant_invoices(db: Any, tenant: str, rules: Any = None) -> list[dict]:
    """The issued and voided invoices of `tenant`, newest period first; money as strings with two
    decimals. Each says its `status`, the invoice it `replaces` and the one it was `replaced_by`
    ("" for none) and its `credit_notes` (numbers). With `rules`, each also says how it is paid
    (billing/settlement.py): `issue_date` (billing time zone), `prepaid`, `amount_due` (what the
    invoice asked at issue less its credit notes), `due_date` (null when nothing is due), `settled`."""
    found = store.headers(db, tenant=tenant, status=("issued", "voided"))
    replaced_by = {h.replaces: h.number for h in found if h.replaces}
    notes: dict[str, list[str]] = {}
    credited: dict[str, Decimal] = {}
    for note in credit_notes(db, tenant=tenant):
        notes.setdefault(note.invoice, []).append(note.number)
        credited[note.invoice] = credited.get(note.invoice, Decimal(0)) + note.total
    out = []
    for header in sorted(found, key=lambda h: (h.period, h.number), reverse=True):
        out.append({
            "number": header.number, "period": header.period, "status": header.status,
            "issued_at": header.issued_at, "currency": header.currency,
            **{name: f"{getattr(header, name):.2f}" for name in _MONEY},
            "replaces": header.replaces, "replaced_by": replaced_by.get(header.number, ""),
            "credit_notes": notes.get(header.number, []),
        })
        if rules is not None:
            settlement = settlement_of(db, rules, SimpleNamespace(tenant=tenant, number=header.number,
                                                                  total=header.total, issued_at=header.issued_at))
            # what is left to pay: the invoice's ask at issue less its credit notes (a voided one: nothing)
            due = max(settlement.amount_due - credited.get(header.number, Decimal(0)), Decimal(0))
            if header.status != "issued":
                due = Decimal(0)
            out[-1].update(issue_date=str(settlement.issue_date), prepaid=settlement.prepaid,
                           amount_due=f"{due:.2f}", due_date=str(settlement.due_date) if due else None,
                           settled=not due)
    return out


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
