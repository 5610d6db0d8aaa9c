"""Errors of the billing package (the state of money): one line each, saying what to do.

    BillingError                 base; the CLI prints str(exc) and exits 1
    ├── NotFound                 the invoice, tenant or period asked for does not exist
    ├── LeaseError               (billing/invoice_lock.py) the invoicing lease is held or lost
    ├── TenantRefused            (billing/tenants.py) a malformed tenant id, name or note
    ├── BalanceRefused           (billing/balances.py) a top-up or budget that cannot be taken
    └── InvalidDeliveryQuery     (billing/webhook_deliveries.py) a malformed delivery query

Rule errors (a period before the first rule) are the rules' own (`billing_rules.errors`);
ClickHouse errors are the warehouse's.
"""


class BillingError(Exception):
    """Base of every error of the billing package."""


class NotFound(BillingError):
    """A period, tenant or invoice that was asked for does not exist."""
