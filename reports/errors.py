"""Errors of the reports package (what people read): one line each, saying what to do.

    ReportsError     base; the CLI prints str(exc) and exits 1
    ├── ArchiveError      (reports/archive.py) an archive that cannot be written or verified
    ├── RetentionRefused  (reports/retention.py) a retention run that would lose data
    └── FontMissing       (reports/render/fonts.py) no CJK font to embed in a PDF

An invoice, tenant or period that does not exist is the billing package's NotFound
(billing/errors.py); rule errors (an unknown site for a what-if) are the rules' own
(`billing_rules.errors`); ClickHouse errors are the warehouse's.
"""


class ReportsError(Exception):
    """Base of every error of the reports package."""
