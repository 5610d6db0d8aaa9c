"""What people read: usage reports, cost share, the audit, archives and retention, and the
documents (render/: JSON, CSV, PDF; invoice_files.py writes a period's invoices as files).

Reports read rated usage through usage/ and the state of money through billing/; they
change no money state (pyproject.toml's import-linter contracts keep billing/ beneath).
"""
