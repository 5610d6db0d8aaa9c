"""A credit note as a document (issue 24): the note and what its documents print around it.
Plain data; `reports.credit_note_document` builds it, `reports.render.credit_note` writes it
as JSON, CSV and PDF.

    credit_note   billing.credit_notes.CreditNote, with its lines (amounts before tax)
    invoice       the invoice it credits, with its lines (a credit note line names one by its number)
    seller        billing.toml `[seller]` (None: the rules name none, and the documents say so)
    buyer         as on the credited invoice: the one it was issued with
    issue_date    the note's issue time's date in the billing time zone
    names         what the rule files call the sites, bands and credits on the invoice, per language
                  (as reports.invoice_model.InvoiceDocument.names)
    prepaid       whether the tenant has top-ups (billing.balances.has_top_ups): the credit returns to
                  its prepaid balance, or comes off what a postpaid tenant owes; None: not known
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date

from billing.credit_notes import CreditNote
from billing_rules import IssuedInvoice, Seller
from reports.invoice_model import Buyer

__all__ = ["CreditNoteDocument"]


@dataclass(frozen=True)
class CreditNoteDocument:
    credit_note: CreditNote
    invoice: IssuedInvoice | None = None  # None: a bare note rendered with nothing around it
    seller: Seller | None = None
    buyer: Buyer | None = None
    issue_date: date | None = None
    names: Mapping[tuple[str, str, str], str] = field(default_factory=dict)
    prepaid: bool | None = None  # the tenant has top-ups (the credit returns to its balance); None: not known

    def name(self, lang: str, kind: str, key: str | None) -> str | None:
        """The rules' name of a site, band ("site/band") or credit grant in `lang`; None without one."""
        return self.names.get((lang, kind, key or ""))
