"""Build an invoice's document (reports.invoice_model): the stored invoice with its seller, buyer,
dates, settlement and the credit left — what every rendering of it prints.

    invoice_document(db, rules, tenant, period) -> InvoiceDocument     the one that stands (issued, else the draft)
    invoice_document(db, rules, tenant, number=N) -> InvoiceDocument   that one, in whatever state (NotFound: none)
    document_of(db, rules, invoice) -> InvoiceDocument
    parties_of(db, rules, invoice) -> (Seller, Buyer)   as the invoice was issued with them
    buyer_of(db, tenant) -> Buyer                 the registry's row as a document prints it
    names_of(rules, invoice) -> {(lang, kind, key): name}   the rules' names of its sites, bands and credits

`buyer_of` and `names_of` serve the credit note's document too (reports/credit_note_document.py).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from billing import invoice_store
from billing.accounts import invoice_position, today
from billing.credit_notes import credit_notes
from billing.invoicing import load_invoice
from billing.settlement import credits_left, issue_date, settlement_of
from billing.tenants import find_tenant
from billing_rules import IssuedInvoice
from billing_rules.parties import Seller
from reports.invoice_model import Buyer, InvoiceDocument
from schemas.ids import is_id

__all__ = ["buyer_of", "document_of", "invoice_document", "names_of", "parties_of"]


def invoice_document(db: Any, rules: Any, tenant: str | None, period: str | None = None, *,
                     number: str | None = None) -> InvoiceDocument:
    """The document of `tenant`'s invoice for `period` that stands (issued, else its draft), or of
    invoice `number` (a number or draft id; of `tenant` unless it is None) in whatever state;
    billing.errors.NotFound when there is none."""
    if number is not None:
        return document_of(db, rules, invoice_store.find(db, number, tenant=tenant))
    return document_of(db, rules, load_invoice(db, tenant, period))


def document_of(db: Any, rules: Any, invoice: IssuedInvoice) -> InvoiceDocument:
    """Everything around `invoice` that its documents print: the seller and buyer it was issued
    with (a draft: the rules' and the registry's as they are today), the rest read now."""
    lo, hi = rules.period_bounds(invoice.period)
    tz = rules.billing_tz
    seller, buyer = parties_of(db, rules, invoice)
    return InvoiceDocument(
        invoice=invoice,
        seller=seller,
        buyer=buyer,
        issue_date=issue_date(rules, invoice.issued_at),
        service_start=datetime.fromtimestamp(lo, tz).date(),
        service_end=(datetime.fromtimestamp(hi, tz) - timedelta(days=1)).date(),
        settlement=settlement_of(db, rules, invoice) if invoice.status == "issued" else None,
        replaced_by=_replaced_by(db, invoice),
        credit_notes=tuple(n.number for n in credit_notes(db, invoice=invoice.number)) if invoice.number else (),
        credits_left=tuple(credits_left(db, rules, invoice.tenant, invoice.period)),
        period_hours=Decimal(hi - lo) / 3600,
        names=names_of(rules, invoice),
        payment=(invoice_position(db, rules, invoice, today(rules))[0]
                 if invoice.status != "draft" and invoice.number else None),
    )


def parties_of(db: Any, rules: Any, invoice: IssuedInvoice) -> tuple[Seller | None, Buyer]:
    """(seller, buyer) as `invoice` was issued with them (issue 37: on the books with the invoice), so
    that a document downloaded again is the one sent; a draft, or an invoice issued before the books
    kept them, prints the rules' seller and the registry's buyer as they are today."""
    kept = invoice_store.parties(db, invoice.id) if invoice.status != "draft" else None
    if kept is None:
        return rules.seller, buyer_of(db, invoice.tenant)
    seller, buyer = kept
    return (Seller(**seller) if seller is not None else None), Buyer(**buyer)


def buyer_of(db: Any, tenant: str) -> Buyer:
    """`tenant` as the registry has it today; an unregistered tenant (or a hostile id) with its id only."""
    registered = find_tenant(db, tenant) if is_id(tenant) else None  # a hostile id is never registered
    return Buyer(tenant) if registered is None else Buyer(
        tenant=tenant, display_name=registered.display_name, legal_name=registered.legal_name,
        tax_id=registered.tax_id, address=registered.address, email=registered.email)


def names_of(rules: Any, invoice: IssuedInvoice) -> dict[tuple[str, str, str], str]:
    """What the rules call the sites, bands and credits on `invoice` (and its tenant's grants), per language."""
    names: dict[tuple[str, str, str], str] = {}
    for line in invoice.lines:
        if line.site and rules.has_site(line.site):
            names["en", "site", line.site] = rules.site(line.site).name
        keys = (("site", line.site), ("band", f"{line.site}/{line.band}" if line.band else None), ("credit", line.credit_id))
        for kind, key in keys:
            if key and rules.name_zh(kind, key):
                names["zh-CN", kind, key] = rules.name_zh(kind, key)
    for grant in rules.credit_grants(invoice.tenant, new_tenant=True):
        names["en", "credit", grant.id] = grant.reason
        if rules.name_zh("credit", grant.id):
            names["zh-CN", "credit", grant.id] = rules.name_zh("credit", grant.id)
    return names


def _replaced_by(db: Any, invoice: IssuedInvoice) -> str:
    """The number of the invoice that replaces voided `invoice`, '' while there is none."""
    if invoice.status != "voided":
        return ""
    return next((h.number for h in invoice_store.headers(db, tenant=invoice.tenant, period=invoice.period)
                 if h.replaces == invoice.number and h.number), "")
