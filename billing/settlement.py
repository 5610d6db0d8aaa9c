"""How an issued invoice is paid: its due date, or the prepaid balance that settles it, and the credit left.

    settlement_of(db, rules, invoice) -> Settlement
    credits_left(db, rules, tenant, after_period=None) -> [CreditBalance]

A tenant with top-ups in its ledger (billing/balances.py) is *prepaid*: its invoices are
settled from the balance. The balance after an invoice is

    Σ top-ups recorded up to its issue time − Σ totals of the tenant's invoices issued up to it
                                            + Σ totals of its credit notes issued up to it

and the invoice is settled when that is ≥ 0; otherwise the part of its total the balance
did not cover is due. Every other tenant is *postpaid*: the whole total is due. Whatever
is due, is due `rules.payment_terms_days` after the issue date in the billing time zone.

This is what the invoice asked at its issue, as its documents print it; what is still unpaid
after payments, credit notes and write-offs is billing/accounts.py's (issue 38).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from billing.invoicing import credit_spent
from billing.tenants import trial_tenants
from billing_rules import CreditBalance, IssuedInvoice, credit_balances

__all__ = ["Settlement", "credits_left", "issue_date", "settlement_of"]


@dataclass(frozen=True)
class Settlement:
    """What an issued invoice asks the tenant to do; money in CNY with VAT."""

    issue_date: date  # in the billing time zone
    prepaid: bool  # the tenant has top-ups: invoices are settled from its balance
    balance_after: Decimal | None  # prepaid only: the balance once this invoice is settled
    amount_due: Decimal  # what the tenant is asked to pay: the total, or what the balance did not cover
    due_date: date | None  # issue date + payment terms; None when nothing is due

    @property
    def settled(self) -> bool:
        """True when nothing is due: a prepaid invoice the balance covered, or a zero total."""
        return self.amount_due == 0


def issue_date(rules: Any, issued_at: str) -> date:
    """The date, in the billing time zone, of an RFC 3339 issue time ("2026-12-01T19:24:46Z" → 2026-12-02)."""
    moment = datetime.fromisoformat(issued_at.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(rules.billing_tz).date()


# The invoice's own stored issue time (milliseconds: the RFC 3339 text of an IssuedInvoice is cut to seconds).
_PREPAID_SQL = """
WITH (SELECT max(issued_at) FROM invoices FINAL WHERE number = {n:String} AND tenant = {t:String}
      AND status != 'draft') AS at
SELECT
    (SELECT count() FROM balance_ledger FINAL WHERE tenant = {t:String}) AS top_ups,
    (SELECT sum(amount) FROM balance_ledger FINAL WHERE tenant = {t:String} AND created_at <= at),
    (SELECT sum(total) FROM invoices FINAL WHERE tenant = {t:String} AND status != 'draft' AND issued_at <= at),
    (SELECT sum(total) FROM credit_notes FINAL WHERE tenant = {t:String} AND issued_at <= at),
    (SELECT any(due_on) FROM invoice_terms FINAL WHERE number = {n:String})
"""


def settlement_of(db: Any, rules: Any, invoice: IssuedInvoice) -> Settlement:
    """The settlement of `invoice` (see the module docstring); reads the ledger and the tenant's invoices.
    Only its tenant, number, total and issued_at are read."""
    issued = issue_date(rules, invoice.issued_at)
    count, topped, invoiced, credited, kept_due = db.query(_PREPAID_SQL, {"t": invoice.tenant, "n": invoice.number})[0]
    # the due date the invoice was issued with (issue 38: invoice_terms), else today's terms
    due_on = kept_due if kept_due is not None and kept_due.year > 1970 else issued + timedelta(
        days=rules.payment_terms_days)
    total = Decimal(invoice.total)
    if int(count):
        after = Decimal(topped or 0) - Decimal(invoiced or 0) + Decimal(credited or 0)
        due = min(total, max(-after, Decimal(0))).quantize(Decimal("0.01"))
        return Settlement(issued, True, after.quantize(Decimal("0.01")), due, due_on if due else None)
    due = total.quantize(Decimal("0.01"))
    return Settlement(issued, False, None, due, due_on if due else None)


def credits_left(db: Any, rules: Any, tenant: str, after_period: str | None = None,
                 *, now: datetime | None = None) -> list[CreditBalance]:
    """The tenant's credit grants with what is left of each once its invoices up to and
    including `after_period` have spent theirs (default: every invoice so far), usable in
    the period after it (default: the current one). Expired grants are not listed; the trial
    credit counts only for a tenant registered and active now (billing/tenants.py)."""
    if after_period is None:
        moment = now or datetime.now(timezone.utc)
        period = rules.period_of(int(moment.timestamp()))
    else:
        period = rules.next_period(after_period)
    grants = rules.credit_grants(tenant, new_tenant=tenant in trial_tenants(db))
    return credit_balances(grants, credit_spent(db, tenant, period), period)
