"""A statement of account (对账单, issue 38) as a document: the statement and what its documents print around it.

    statement_document(db, rules, tenant, start, end) -> StatementDocument
    StatementDocument(statement, seller=, buyer=, aging=)

`reports.render.statement` writes it as JSON, CSV and PDF (`render_statement(doc, fmt, lang=)`;
a bare `billing_rules.accounts.Statement` renders too, with nothing around it). The figures are
billing_rules/accounts.py's, from the one read of the tenant's account (billing/accounts.py
`ledger`): the statement from `start` to `end` and the aging as of `end`, which splits the
closing balance — closing = aging.outstanding − aging.unapplied, to the fen.

The seller and buyer are those a document made today prints (reports/invoice_document.py: the
rules' `[seller]`, the registry's row of the tenant): a statement is made when it is asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

from billing.accounts import ledger
from billing.errors import NotFound
from billing.tenants import find_tenant, shown_value
from billing_rules import Seller
from billing_rules.accounts import Aging, Statement, aging, statement
from reports.invoice_document import buyer_of
from reports.invoice_model import Buyer
from schemas.ids import is_id

__all__ = ["StatementDocument", "statement_document"]


@dataclass(frozen=True)
class StatementDocument:
    statement: Statement
    seller: Seller | None = None  # billing.toml [seller]; None: the rules name none
    buyer: Buyer | None = None  # the tenant as the registry has it (an unregistered tenant: its id only)
    aging: Aging | None = None  # the tenant's receivables as of statement.end; None: not known
    currency: str = "CNY"


def statement_document(db: Any, rules: Any, tenant: str, start: date, end: date) -> StatementDocument:
    """`tenant`'s statement from `start` to `end` (both included, billing time zone) with the aging as of `end`.
    NotFound for a tenant that is neither registered nor has any document (an unregistered tenant
    that was invoiced has a statement); ValueError when `start` is after `end`."""
    if start > end:
        raise ValueError(f"the statement starts on {start}, after its end {end}")
    registered = find_tenant(db, tenant) if is_id(tenant) else None
    account = ledger(db, rules, tenant)
    if registered is None and not (account.invoices or account.payments or account.credit_notes):
        raise NotFound(f"no tenant {shown_value(tenant)}: not registered, and no invoice, credit note or payment")
    found = statement(tenant, start, end, invoices=account.invoices, payments=account.payments,
                      credit_notes=account.credit_notes, refunds=account.refunds, write_offs=account.write_offs)
    rows = aging(account.states(end).values(), account.unapplied(end))
    return StatementDocument(statement=found, seller=rules.seller, buyer=buyer_of(db, tenant),
                             aging=rows[0] if rows else Aging(tenant))
