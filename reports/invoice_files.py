"""Invoices as files: every stored invoice of a period rendered as JSON, CSV and PDF.

The invoice run (billing/invoicing.py) only stores invoices; `gpubill invoice run --out`
and the demo write their documents through here, after the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from billing.invoicing import list_invoices
from reports.invoice_document import invoice_document
from reports.outputs import DEFAULT_FILE_MODE, make_dirs, output_name, path_inside, write_output
from reports.render import render_invoice


def write_invoice_files(db: Any, rules: Any, period: str, out_dir: Path, *, file_mode: int = DEFAULT_FILE_MODE,
                        lang: str = "en", formats: tuple[str, ...] = ("json", "csv", "pdf")) -> list[Path]:
    """Render every invoice of `period` as JSON, CSV and PDF (or `formats`) into `out_dir`, with `file_mode`;
    the PDFs labelled in `lang` (reports.render.i18n; JSON and CSV are the same in every language).

    Named NUMBER_TENANT_PERIOD.fmt by `reports.outputs.output_name` (a PDF in another language
    than English NUMBER_TENANT_PERIOD.LANG.pdf, beside the English one): a tenant or number that
    is not an id (a `/`, `..`, NUL, 250 characters) is named by its hash, so every invoice
    gets its own files inside `out_dir`.
    """
    make_dirs(out_dir, file_mode)
    written = []
    for number, tenant, _ in list_invoices(db, period):
        document = invoice_document(db, rules, tenant, period)
        for fmt in formats:
            path = path_inside(out_dir, output_name(number, tenant, period, fmt, lang=lang))
            written.append(write_output(path, render_invoice(document, fmt, lang=lang), file_mode))
    return written
