"""Invoices (SPEC §5, §8) as JSON, CSV and PDF.

``inv`` is a `billing_rules.IssuedInvoice` (what `billing.invoicing.load_invoice`
returns) and its lines are `billing_rules.InvoiceLine`s, the one line shape that is built,
stored and rendered. Only the fields printed are read — ``tenant, period, number, status,
issued_at, currency, lines, subtotal, net, tax, total, vat_rate``; per line ``kind``, the
grouping fields ``gpu_model, plan, site, band, pue, ref_period, credit_id`` (None, or
absent, where they do not apply), ``description, quantity, unit, unit_price, amount`` —
so a hand-made stand-in with those attributes renders too.

:func:`invoice_to_dict` is the contract of ``gpubill invoice show --format json``: money
as strings with two decimals, quantities with at least six, unit prices with six, PUE and
VAT rate as short decimals. The CSV and PDF are written from that same dict, so the three
formats can never disagree on a figure.
"""

from __future__ import annotations

import csv
import io
from typing import Any

import orjson

from billing_rules import InvoiceLine, IssuedInvoice
from reports.render.format import (
    as_decimal,
    csv_cell,
    money_str,
    plain,
    quantity_str,
    rate_str,
    renderer_for,
    unit_price_str,
)
from reports.render.i18n import check_lang
from reports.render.i18n import label as translate
from reports.render.pdf import ACCENT, MUTED, RULE, ReportPDF, draw_table, fit_text

__all__ = ["GROUPING_FIELDS", "INVOICE_CSV_COLUMNS", "invoice_to_dict", "render_invoice"]

GROUPING_FIELDS = ("gpu_model", "plan", "site", "band", "pue", "ref_period", "credit_id")
INVOICE_CSV_COLUMNS = ("kind", *GROUPING_FIELDS, "description", "quantity", "unit", "unit_price", "amount")
SELLER = "gpubill GPU Cloud"


def _opt(value: Any, fmt: Any) -> Any:
    return None if value is None else fmt(value)


def _line_to_dict(line: InvoiceLine) -> dict[str, Any]:
    d: dict[str, Any] = {"kind": plain(line.kind)}
    for name in GROUPING_FIELDS:
        value = getattr(line, name, None)
        if value is not None:
            d[name] = rate_str(value) if name == "pue" else plain(value)
    d["description"] = getattr(line, "description", None)
    d["quantity"] = _opt(line.quantity, quantity_str)
    d["unit"] = plain(line.unit)
    d["unit_price"] = _opt(line.unit_price, unit_price_str)
    d["amount"] = money_str(line.amount)
    return d


def invoice_to_dict(inv: IssuedInvoice) -> dict[str, Any]:
    """The invoice as plain JSON-ready data, keys in the order of the CLI contract."""
    return {
        "tenant": inv.tenant,
        "period": inv.period,
        "number": inv.number,
        "status": plain(inv.status),
        "issued_at": inv.issued_at,
        "currency": inv.currency,
        "lines": [_line_to_dict(line) for line in inv.lines],
        "subtotal": money_str(inv.subtotal),
        "net": money_str(inv.net),
        "tax": money_str(inv.tax),
        "total": money_str(inv.total),
        "vat_rate": rate_str(inv.vat_rate),
    }


def invoice_json(inv: IssuedInvoice) -> bytes:
    return orjson.dumps(invoice_to_dict(inv), option=orjson.OPT_INDENT_2)


def invoice_csv(inv: IssuedInvoice) -> bytes:
    """One row per line, then ``subtotal``, ``net``, ``tax`` and ``total`` rows (amount only).

    Text cells a spreadsheet would run as a formula get a leading ``'``; amounts such as
    ``-10.00`` stay numbers (:func:`reports.render.format.csv_cell`).
    """
    d = invoice_to_dict(inv)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=INVOICE_CSV_COLUMNS, lineterminator="\r\n", restval="")
    writer.writeheader()
    for line in d["lines"]:
        writer.writerow({k: ("" if v is None else csv_cell(v)) for k, v in line.items()})
    vat = _vat_label(inv.vat_rate)
    for key, description in (("subtotal", "Subtotal"), ("net", "Net"), ("tax", vat), ("total", "Total")):
        writer.writerow({"kind": key, "description": description, "amount": csv_cell(d[key])})
    return buf.getvalue().encode("utf-8")


def _vat_label(rate: Any) -> str:
    """``Decimal("0.06") -> "VAT 6%"``, ``Decimal("0.065") -> "VAT 6.5%"``."""
    return f"VAT {(as_decimal(rate) * 100).normalize():f}%"


_DETAILS = (("gpu_model", None), ("plan", "detail.plan"), ("site", "detail.site"), ("band", "detail.band"),
            ("pue", "detail.pue"), ("ref_period", "detail.ref_period"))


def _line_label(pdf: ReportPDF, line: dict[str, Any]) -> tuple[str, str]:
    """Main text and a detail text (grouping fields) for one line of the PDF table.

    In English the main text is the line's stored description (the ledger's words); in
    another language the line's kind in that language, with the stored description kept in
    the detail when it says more than the kind (a credit's reason, an adjustment's period).
    """
    kind = str(line["kind"])
    details = []
    for name, key in _DETAILS:
        if name in line:
            details.append(pdf.label(key, value=line[name]) if key else str(line[name]))
    kind_title = pdf.label(f"kind.{kind}") if kind in _KINDS else kind.capitalize()
    if pdf.doc_lang == "en":
        return line.get("description") or kind_title, ", ".join(details)
    description = line.get("description") or ""
    if kind in ("credit", "adjustment") and description:
        details.insert(0, description)
    return kind_title, ", ".join(details)


_KINDS = ("rent", "electricity", "credit", "discount", "adjustment")


def _grouped_money(text: str) -> str:
    sign, digits = ("-", text[1:]) if text.startswith("-") else ("", text)
    whole, _, frac = digits.partition(".")
    return f"{sign}{int(whole):,}.{frac}"


def _outside_texts(d: dict[str, Any]) -> list[str]:
    """Every text of the invoice that comes from outside (they decide whether the PDF needs the CJK font)."""
    texts = [str(d[k] or "") for k in ("tenant", "period", "number", "status", "issued_at", "currency")]
    for line in d["lines"]:
        texts.extend(str(v) for v in line.values() if v is not None)
    return texts


def invoice_pdf(inv: IssuedInvoice, *, lang: str = "en") -> bytes:
    """An A4 invoice: seller and customer blocks, the line table, the totals, 'Amounts in CNY'; labels in `lang`."""
    d = invoice_to_dict(inv)
    status = str(d["status"] or "")
    number_text = d["number"] or translate(lang, "inv.draft")
    pdf = ReportPDF(
        title=translate(lang, "inv.doc_title", number=number_text),
        footer_note=translate(lang, "inv.footer", seller=SELLER, number=number_text, tenant=d["tenant"],
                              period=d["period"]),
        created_at=d["issued_at"],
        lang=lang,
        texts=_outside_texts(d),
    )
    pdf.add_page()
    width = pdf.usable_width
    top = pdf.get_y()

    # seller block (left) and the invoice title (right)
    pdf.set_font("Helvetica", "B", 15)
    pdf.set_text_color(*ACCENT)
    pdf.cell(width / 2, 8, SELLER)
    pdf.set_font("Helvetica", "B", 22)
    pdf.set_text_color(33, 37, 41)
    pdf.cell(width / 2, 8, pdf.txt(pdf.label("inv.heading")), align="R", new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Helvetica", "", 8)
    pdf.set_text_color(*MUTED)
    pdf.cell(width / 2, 4.5, pdf.txt(pdf.label("inv.tagline")))
    if status and status.lower() not in ("final", "finalized", "issued"):
        pdf.set_font("Helvetica", "B", 9)
        pdf.set_text_color(192, 57, 43)
        pdf.cell(width / 2, 4.5, pdf.txt(status.upper()), align="R")
    pdf.set_text_color(33, 37, 41)
    pdf.set_y(top + 18)
    pdf.set_draw_color(*ACCENT)
    pdf.set_line_width(0.6)
    pdf.line(pdf.l_margin, pdf.get_y(), pdf.l_margin + width, pdf.get_y())
    pdf.ln(5)

    # customer (left) and invoice facts (right)
    y = pdf.get_y()
    pdf.set_font("Helvetica", "", 7.5)
    pdf.set_text_color(*MUTED)
    pdf.cell(0, 4, pdf.txt(pdf.label("inv.bill_to")), new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Helvetica", "B", 11)
    pdf.set_text_color(33, 37, 41)
    pdf.cell(width / 2, 6, fit_text(pdf, d["tenant"], width / 2 - 2))
    shown_status = pdf.label("status.finalized") if status == "finalized" and lang != "en" else status
    facts = [
        (pdf.label("inv.number"), d["number"] or pdf.label("inv.not_numbered")),
        (pdf.label("inv.period"), d["period"]),
        (pdf.label("inv.issued"), d["issued_at"] or pdf.label("inv.not_issued")),
        (pdf.label("inv.status"), shown_status or "-"),
        (pdf.label("inv.currency"), d["currency"]),
    ]
    pdf.set_y(y)
    for label, value in facts:
        pdf.set_x(pdf.l_margin + width * 0.55)
        pdf.set_font("Helvetica", "", 8)
        pdf.set_text_color(*MUTED)
        pdf.cell(width * 0.18, 5, pdf.txt(label))
        pdf.set_font("Helvetica", "B", 8)
        pdf.set_text_color(33, 37, 41)
        pdf.cell(width * 0.27, 5, pdf.txt(value), align="R", new_x="LMARGIN", new_y="NEXT")
    pdf.ln(6)

    # lines
    rows = []
    for line in d["lines"]:
        main, detail = _line_label(pdf, line)
        rows.append((
            f"{main}\n{detail}" if detail else main,
            line["quantity"] or "",
            line["unit"] or "",
            line["unit_price"] or "",
            _grouped_money(line["amount"]),
        ))
    draw_table(
        pdf,
        headings=tuple(pdf.label(k) for k in ("inv.description", "inv.quantity", "inv.unit", "inv.unit_price",
                                              "inv.amount")),
        rows=rows,
        col_widths=(86, 28, 20, 22, 24),
        align=("LEFT", "RIGHT", "LEFT", "RIGHT", "RIGHT"),
        font_size=8,
        wrap=(True, False, False, False, False),
    )
    pdf.ln(4)

    # totals, right-aligned block
    vat_label = _vat_label(inv.vat_rate) if lang == "en" else pdf.label("inv.vat", rate=_vat_percent(inv.vat_rate))
    totals = [(pdf.label("inv.subtotal"), d["subtotal"]), (pdf.label("inv.net"), d["net"]), (vat_label, d["tax"])]
    if pdf.get_y() > pdf.h - 60:
        pdf.add_page()
    x_label, w_label, w_value = pdf.l_margin + width - 80, 50, 30
    for label, value in totals:
        pdf.set_x(x_label)
        pdf.set_font("Helvetica", "", 9)
        pdf.cell(w_label, 6, pdf.txt(label))
        pdf.cell(w_value, 6, _grouped_money(value), align="R", new_x="LMARGIN", new_y="NEXT")
    pdf.set_draw_color(*RULE)
    pdf.set_line_width(0.3)
    pdf.line(x_label, pdf.get_y() + 0.5, x_label + w_label + w_value, pdf.get_y() + 0.5)
    pdf.ln(1.5)
    pdf.set_x(x_label)
    pdf.set_fill_color(226, 234, 244)
    pdf.set_font("Helvetica", "B", 11)
    pdf.cell(w_label, 8, pdf.txt(pdf.label("inv.total", currency=d["currency"])), fill=True)
    pdf.cell(w_value, 8, pdf.txt(pdf.label("inv.total_value", amount=_grouped_money(d["total"]))), align="R",
             fill=True, new_x="LMARGIN", new_y="NEXT")
    pdf.ln(8)

    pdf.set_font("Helvetica", "", 8)
    pdf.set_text_color(*MUTED)
    notes = pdf.label("inv.notes", currency=d["currency"], vat=vat_label)
    pdf.multi_cell(0, 4, pdf.txt(notes), new_x="LMARGIN", new_y="NEXT", wrapmode=pdf.wrapping())
    return bytes(pdf.output())


def _vat_percent(rate: Any) -> str:
    """``Decimal("0.06") -> "6"``, ``Decimal("0.065") -> "6.5"``."""
    return f"{(as_decimal(rate) * 100).normalize():f}"


_RENDERERS = {"json": invoice_json, "csv": invoice_csv, "pdf": invoice_pdf}


def render_invoice(inv: IssuedInvoice, fmt: str, *, lang: str = "en") -> bytes:
    """The invoice as bytes in ``fmt`` (json, csv or pdf), labelled in `lang`
    (:data:`reports.render.i18n.LANGS`; JSON and CSV are the machine contract, the same in every language)."""
    check_lang(lang)
    render = renderer_for(_RENDERERS, fmt, "an invoice")
    return invoice_pdf(inv, lang=lang) if fmt == "pdf" else render(inv)
