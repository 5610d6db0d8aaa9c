"""An invoice as a document (SPEC §5 "An invoice names seller and buyer"): the stored invoice and
everything a finance team reads around it. Plain data; `reports.invoice_document` builds it,
`reports.render.invoice` writes it as JSON, CSV and PDF.

    seller        billing.toml `[seller]` (None: the rules name none, and the documents say so)
    buyer         the tenant registry's row: display name, legal name, tax id, address, e-mail
    issue_date    the issue time's date in the billing time zone
    service_*     the first and last day of the billing period, billing time zone
    settlement    due date and amount due, or the prepaid balance that settled it (billing/settlement.py);
                  None for a draft (nothing is asked yet) and a voided invoice
    credits_left  each credit grant's remainder once this invoice spent its share
    period_hours  hours of the billing period: a monthly plan's per-hour unit price × these is
                  its monthly price, which the documents print as the price was written
    names         what the rule files call the sites, bands and credits on the invoice, per language:
                  (lang, kind, key) → name, e.g. ("zh-CN", "site", "gz-guian") → 贵州贵安
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from typing import Any

from billing.settlement import Settlement
from billing_rules import CreditBalance, IssuedInvoice, Seller

__all__ = ["Buyer", "InvoiceDocument"]


@dataclass(frozen=True)
class Buyer:
    """Who is billed; '' where the registry has nothing (an unregistered tenant has only its id)."""

    tenant: str
    display_name: str = ""
    legal_name: str = ""
    tax_id: str = ""
    address: str = ""
    email: str = ""


@dataclass(frozen=True)
class InvoiceDocument:
    invoice: IssuedInvoice
    seller: Seller | None = None
    buyer: Buyer | None = None
    issue_date: date | None = None
    service_start: date | None = None
    service_end: date | None = None
    settlement: Settlement | None = None
    credits_left: tuple[CreditBalance, ...] = ()
    period_hours: Decimal | None = None
    names: Mapping[tuple[str, str, str], str] = field(default_factory=dict)
    replaced_by: str = ""  # a voided invoice: the number of its replacement, once issued
    credit_notes: tuple[str, ...] = ()  # the numbers of the credit notes on it
    payment: Any = None  # issued or voided: billing_rules.accounts.InvoiceState today (issue 38), derived when read

    def name(self, lang: str, kind: str, key: str | None) -> str | None:
        """The rules' name of a site, band ("site/band") or credit grant in `lang`; None without one."""
        return self.names.get((lang, kind, key or ""))


def as_document(value: "InvoiceDocument | IssuedInvoice") -> InvoiceDocument:
    """`value` if it is a document; a bare invoice (tests, stand-ins) as a document with nothing around it."""
    return value if isinstance(value, InvoiceDocument) else InvoiceDocument(invoice=value)
