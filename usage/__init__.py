"""Rated usage and its hourly rollups: what the worker wrote, read exactly.

    rated.py      the sources every reader reads through: rollups for whole hours, rows for the rest
    rollup.py     rolling finished hours up (idempotent, in batches of hours)
    by_tenant.py  rent seconds and allocated energy per tenant, as billing_rules prices them
    queries.py    the SQL of those reads (pure functions of a source relation)
    failpoints.py fault injection for the fault tests (pauses between writes)

Nothing here holds money state or renders anything: billing/ and reports/ read usage
through this package (pyproject.toml's import-linter contracts keep it beneath both).
"""
