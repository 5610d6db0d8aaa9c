"""Errors of the reports package: one line each, saying what to do.

    ReportsError     base; the CLI prints str(exc) and exits 1
    └── NotFound     the invoice, tenant or period asked for does not exist

Rule errors (an unknown site for a what-if, a period before the first rule) are the
rules' own (`billing_rules.errors`); ClickHouse errors are the warehouse's.
"""


class ReportsError(Exception):
    """Base of every error of the reports package."""


class NotFound(ReportsError):
    """A period, tenant or invoice that was asked for does not exist."""
