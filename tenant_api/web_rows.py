"""What the web page's summary, invoices table and credit notes table show, from the
Service's answers (tenant_api/service.py), in the page's words: pure functions of a dict or a
dataclass and a `Words`, no request, no database.

    summary(t, current)          the month to date: figures, estimate or invoiced, how fresh
    invoice_row(t, invoice)      figures, what to pay, the state: voided (replaced by …), replaces …, credit notes,
                                 paid, outstanding, unpaid / partially paid / paid, overdue (issue 38)
    credit_note_row(t, note)     the invoice it corrects, the reason in words, the date, the total, its files
    payment_row(t, payment)      when and how it was received, where it went, what is held, reversed
    statement_view(t, statement) opening, each entry in words with the running balance, closing, its files
    expiry(t, expires_at)        the key's expiry for the header
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import quote, urlencode

from billing.credit_notes import REASONS
from tenant_api.i18n import Words, moment, money, number

__all__ = ["CREDIT_NOTE_LINKS", "INVOICE_LINKS", "PAYMENT_STATES", "STATEMENT_LINKS", "credit_note_row", "expiry", "invoice_row",
           "payment_row", "statement_view", "summary"]

INVOICE_LINKS = ("pdf", "csv")
CREDIT_NOTE_LINKS = ("pdf", "csv", "json")
STATEMENT_LINKS = ("pdf", "csv", "json")
PAYMENT_STATES = ("unpaid", "partially_paid", "paid")  # the API's words (tenant_api/answers.py InvoiceSummary)
METHODS = ("bank", "alipay", "wechat", "card", "other")  # billing.payments.METHODS
ENTRY_KINDS = ("invoice", "credit_note", "payment", "payment_reversed", "refund", "write_off", "write_off_recovered")


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
    if _positive(invoice.get("written_off")):
        remarks.append(("written-off", t("written_off_remark", amount=_amount(invoice["written_off"]))))
    state = str(invoice.get("payment_state", ""))
    return {"number": number_, "period": str(invoice.get("period", "")), "issued": issued,
            "total": _amount(invoice.get("total")), "due": due, "settled": bool(invoice.get("settled")),
            "voided": voided, "status": t("status_voided") if voided else t("status_issued"), "remarks": remarks,
            "paid": _amount(invoice.get("paid", "0")), "outstanding": _amount(invoice.get("outstanding", "0")),
            # a voided invoice asks nothing: its payment state is not news
            "payment_state": state if state in PAYMENT_STATES and not voided else "",
            "payment_state_text": t(f"state_{state}") if state in PAYMENT_STATES and not voided else "",
            "overdue": bool(invoice.get("overdue")) and not voided, "overdue_text": t("overdue"),
            "links": [(fmt, f"/files/invoices/{quote(number_, safe='')}?format={fmt}") for fmt in INVOICE_LINKS]}


def payment_row(t: Words, payment: Mapping[str, Any]) -> dict[str, Any]:
    """A payment of its table: its ref, when and how it came, its amount, the invoices it paid and
    what of it is held as credit; a reversed one marked with its date."""
    method = str(payment.get("method", ""))
    reversed_on = payment.get("reversed_on")
    return {"ref": str(payment.get("ref", "")), "received": str(payment.get("received_on", "")),
            "method": t(f"method_{method}") if method in METHODS else method,
            "amount": _amount(payment.get("amount")),
            "allocations": [(str(a.get("invoice", "")), _amount(a.get("amount"))) for a in payment.get("allocations", ())],
            "unapplied": _amount(payment.get("unapplied", "0")), "reversed": bool(reversed_on),
            "reversed_text": t("reversed_on", date=str(reversed_on)) if reversed_on else ""}


def statement_view(t: Words, statement: Any) -> dict[str, Any]:
    """A statement of account (billing_rules.accounts.Statement) for the page: its dates, the opening
    and closing balances and each entry in words (a positive balance is what the tenant owes)."""
    entries = [{"date": str(e.on), "kind": e.kind,
                "what": t(f"entry_{e.kind}", document=e.document) if e.kind in ENTRY_KINDS else e.description,
                "amount": money(e.amount), "balance": money(e.balance)} for e in statement.entries]
    start, end = str(statement.start), str(statement.end)
    return {"start": start, "end": end, "opening": money(statement.opening), "closing": money(statement.closing),
            "entries": entries,
            "links": [(fmt, "/files/statement?" + urlencode({"from": start, "to": end, "format": fmt}))
                      for fmt in STATEMENT_LINKS]}


def _positive(value: Any) -> bool:
    try:
        return Decimal(str(value)) > 0
    except (InvalidOperation, ValueError, TypeError):
        return False


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
