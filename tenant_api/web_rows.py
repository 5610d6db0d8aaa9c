"""What the web page's summary, invoices table and credit notes table show, from the
Service's answers (tenant_api/service.py), in the page's words: pure functions of a dict or a
dataclass and a `Words`, no request, no database.

    summary(t, current)          the month to date: figures, estimate or invoiced, how fresh
    invoice_row(t, invoice)      figures, what to pay, the state: voided (replaced by …), replaces …, credit notes
    credit_note_row(t, note)     the invoice it corrects, the reason in words, the date, the total, its files
    expiry(t, expires_at)        the key's expiry for the header
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import quote

from billing.credit_notes import REASONS
from tenant_api.i18n import Words, moment, money, number

__all__ = ["CREDIT_NOTE_LINKS", "INVOICE_LINKS", "credit_note_row", "expiry", "invoice_row", "summary"]

INVOICE_LINKS = ("pdf", "csv")
CREDIT_NOTE_LINKS = ("pdf", "csv", "json")


def expiry(t: Words, expires_at: Any) -> str:
    if not expires_at:
        return t("no_expiry")
    if isinstance(expires_at, datetime):
        return t("expires", date=expires_at.date().isoformat())
    return t("expires", date=str(expires_at)[:10])


def _amount(value: Any) -> str:
    try:
        return money(value if isinstance(value, Decimal) else Decimal(str(value)))
    except (InvalidOperation, ValueError, TypeError):
        return ""


def summary(t: Words, current: Any) -> dict[str, Any]:
    credits = current.credits
    stats = [
        ("gpu-hours", t("gpu_hours"), number(current.gpu_hours), ""),
        ("kwh", t("kwh"), number(current.kwh), t("kwh_unit")),
        ("rent", t("rent"), money(current.rent), ""),
        ("electricity", t("electricity"), money(current.electricity), ""),
        ("credits", t("credits"), money(-credits) if credits else money(0), ""),
        ("vat", t("vat"), money(current.vat), ""),
    ]
    fresh = t("newest_data", time=moment(current.newest_data_at)) if current.newest_data_at else t("no_data_yet")
    return {"period": current.period, "invoiced": bool(current.invoiced),
            "state": t("invoiced", number=current.invoice_number or "") if current.invoiced else t("estimate"),
            "total_label": t("total") if current.invoiced else t("estimated_total"),
            "total": money(current.estimated_total), "fresh": fresh, "stats": stats}


def invoice_row(t: Words, invoice: Mapping[str, Any]) -> dict[str, Any]:
    """An invoice of the table: its figures, what there is to pay, and its state — a voided one
    with what replaced it, a replacement with what it replaces, and the credit notes on it."""
    number_ = str(invoice.get("number", ""))
    issued = invoice.get("issued_at") or ""
    issued = invoice.get("issue_date") or (moment(issued) if isinstance(issued, datetime) else str(issued)[:10])
    voided = invoice.get("status") == "voided"
    if voided:
        due = t("voided_nothing_due")
    elif invoice.get("prepaid") and invoice.get("settled"):
        due = t("settled_prepaid")
    elif invoice.get("settled"):
        due = t("nothing_due")
    elif invoice.get("due_date"):
        due = t("due_by", amount=_amount(invoice.get("amount_due")), date=invoice["due_date"])
    else:
        due = ""
    remarks = []
    if voided and invoice.get("replaced_by"):
        remarks.append(("replaced-by", t("replaced_by", number=str(invoice["replaced_by"]))))
    if invoice.get("replaces"):
        remarks.append(("replaces", t("replaces", number=str(invoice["replaces"]))))
    if invoice.get("credit_notes"):
        remarks.append(("credit-notes", t("credited_by", numbers=", ".join(map(str, invoice["credit_notes"])))))
    return {"number": number_, "period": str(invoice.get("period", "")), "issued": issued,
            "total": _amount(invoice.get("total")), "due": due, "settled": bool(invoice.get("settled")),
            "voided": voided, "status": t("status_voided") if voided else t("status_issued"), "remarks": remarks,
            "links": [(fmt, f"/files/invoices/{quote(number_, safe='')}?format={fmt}") for fmt in INVOICE_LINKS]}


def credit_note_row(t: Words, note: Mapping[str, Any]) -> dict[str, Any]:
    """A credit note of its table: the invoice it corrects, why (in the page's words), when, and
    what it returns with VAT."""
    number_ = str(note.get("number", ""))
    reason = str(note.get("reason", ""))
    return {"number": number_, "invoice": str(note.get("invoice", "")), "period": str(note.get("period", "")),
            "reason": t(f"reason_{reason}") if reason in REASONS else reason,
            "issued": str(note.get("issue_date") or str(note.get("issued_at") or "")[:10]),
            "total": _amount(note.get("total")),
            "links": [(fmt, f"/files/credit-notes/{quote(number_, safe='')}?format={fmt}") for fmt in CREDIT_NOTE_LINKS]}
