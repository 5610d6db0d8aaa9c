"""Rendering of reports and invoices into bytes or text: pure, no ClickHouse, no Kafka.

The callers (CLI, download service) read the data and pass the models in; everything
here is deterministic for the same input, PDFs included. Renderers import the models
(`billing_rules.IssuedInvoice` and its `InvoiceLine`s, `reports.usage_model.UsageReport`,
`reports.credit_note_model.CreditNoteDocument`, `reports.statement.StatementDocument`, the
cost-share row dicts), never the reverse; this package exports renderers only.

    render_usage(report, fmt, lang=)     customer usage report: csv, json, parquet, pdf
    invoice_to_dict(inv)                 the JSON contract of ``gpubill invoice show``
    render_invoice(inv, fmt, lang=)      json, csv, pdf
    credit_note_to_dict(doc)             the JSON contract of ``gpubill credit-note show``
    render_credit_note(doc, fmt, lang=)  json, csv, pdf
    statement_to_dict(doc)               the JSON contract of ``gpubill statement``
    render_statement(doc, fmt, lang=)    json, csv, pdf: a statement of account (对账单)
    LANGS                                ("en", "zh-CN"): the PDFs' languages (``.i18n``)
    render_cost_share_table(rows, ...)   a rich Table for the terminal
    render_cost_share(rows, fmt, ...)    table (text), csv, json

An unknown ``fmt`` raises ``ValueError("unknown format ...")``, an unknown ``lang``
``ValueError("unknown language ...")``; the language changes a PDF's labels only (CSV, JSON
and Parquet are machine contracts, the same bytes in every language). The pieces live in
``reports.render.usage``, ``.invoice``, ``.credit_note``, ``.statement`` and ``.cost_share``, with
number and text formatting (terminal text, CSV cells) in ``.format``, PDF drawing in ``.pdf``, labels in
``.i18n`` and the CJK font Chinese text needs in ``.fonts`` (a long-lived process calls
``reports.render.fonts.warm_up()`` once at start-up: see there).

The renderers are imported on first use (PEP 562), so that the command line can use
``reports.render.format`` without loading pyarrow and fpdf2.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_HOMES = {
    "LANGS": "reports.render.i18n",
    "credit_note_to_dict": "reports.render.credit_note",
    "invoice_to_dict": "reports.render.invoice",
    "render_cost_share": "reports.render.cost_share",
    "render_cost_share_table": "reports.render.cost_share",
    "render_credit_note": "reports.render.credit_note",
    "render_invoice": "reports.render.invoice",
    "render_statement": "reports.render.statement",
    "render_usage": "reports.render.usage",
    "statement_to_dict": "reports.render.statement",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'reports.render' has no attribute {name!r}")
    return getattr(import_module(_HOMES[name]), name)


__all__ = [
    "LANGS",
    "credit_note_to_dict",
    "invoice_to_dict",
    "render_cost_share",
    "render_cost_share_table",
    "render_credit_note",
    "render_invoice",
    "render_statement",
    "render_usage",
    "statement_to_dict",
]
