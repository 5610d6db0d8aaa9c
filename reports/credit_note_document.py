"""Build a credit note's document (reports.credit_note_model): the stored note with the invoice it
credits, the seller, the buyer and the issue date — what every rendering of it prints.

    credit_note_document(db, rules, number, tenant=None) -> CreditNoteDocument

The seller and buyer are those the credited invoice was issued with, and the rules' names are
read as for the invoice's document (reports.invoice_document), so both documents name them alike.
"""

from __future__ import annotations

from typing import Any

from billing import invoice_store
from billing.balances import has_top_ups
from billing.credit_notes import find_credit_note
from billing.settlement import issue_date
from reports.credit_note_model import CreditNoteDocument
from reports.invoice_document import names_of, parties_of

__all__ = ["credit_note_document"]


def credit_note_document(db: Any, rules: Any, number: str, tenant: str | None = None) -> CreditNoteDocument:
    """The document of credit note `number` (of `tenant` unless it is None); billing.errors.NotFound
    when there is none, so that another tenant's note is as unknown as one that does not exist."""
    note = find_credit_note(db, number, tenant=tenant)
    invoice = invoice_store.find(db, note.invoice, tenant=note.tenant)
    seller, buyer = parties_of(db, rules, invoice)
    return CreditNoteDocument(
        credit_note=note,
        invoice=invoice,
        seller=seller,
        buyer=buyer,
        issue_date=issue_date(rules, note.issued_at),
        names=names_of(rules, invoice),
        prepaid=has_top_ups(db, note.tenant),
    )
