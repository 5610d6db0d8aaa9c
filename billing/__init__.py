"""The state of money: invoices, their numbering and its lease, tenants, balances and budgets.

    invoicing.py        the billing run: invoice every tenant once, gap-free (numbers, lines, headers)
    invoice_lock.py     the invoicing lease: one run at a time per database, fenced
    scheduler.py        when runs and rollups are due (APScheduler triggers)
    tenants.py          the tenant register (and usage of tenants not in it)
    balances.py         prepaid balances, top-ups, budgets
    current_usage.py    the month to date, priced as its invoice would be
    live_spend.py       the live spend positions the tracker keeps
    tenant_invoices.py  a tenant's own invoices, listed
    webhook_deliveries.py  the record of budget-alert webhook attempts
    errors.py           BillingError and NotFound

It reads rated usage through usage/ and stores through the warehouse; it renders no
document and writes no file (reports/ does: reports/invoice_files.py).
"""
