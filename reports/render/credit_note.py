"""Credit notes (issue 24) as JSON, CSV and PDF.

What is rendered is a `reports.credit_note_model.CreditNoteDocument`
(`reports.credit_note_document` builds it); a bare `billing.credit_notes.CreditNote` renders
too, with nothing around it (tests, stand-ins).

:func:`credit_note_to_dict` is the JSON contract: money as strings with two decimals (what is
credited is positive; a line that takes back a negative line of the invoice — a credit, a
discount, an adjustment — is negative), the VAT rate as a short decimal. The CSV and PDF are
written from that same dict, so the three formats never disagree on a figure.

The PDF looks like the invoice (the same masthead, party blocks, facts and totals:
`reports.render.invoice`): seller and the note's facts (number, issue date in the billing zone,
the invoice it credits, its period, the reason); the customer; the note; the lines (the
invoice's line number, what the line is, the amount before tax); credited before VAT → VAT
reversed → total credited (on zh-CN documents also in capital numerals); and what becomes of the
amount, naming the customer: added to its prepaid balance, or credited against what a postpaid
customer owes (`CreditNoteDocument.prepaid`).
"""

from __future__ import annotations

import csv
import io
from typing import Any

import orjson

from billing.credit_notes import REASONS, CreditNote
from reports.credit_note_model import CreditNoteDocument
from reports.render.format import csv_cell, money_str, rate_str, renderer_for
from reports.render.i18n import check_lang
from reports.render.i18n import label as translate
from reports.render.invoice import (
    UNCONFIGURED_BRAND,
    buyer_lines,
    draw_block,
    draw_facts,
    draw_masthead,
    draw_totals,
    grouped_money,
    line_text,
    line_to_dict,
    seller_lines,
    vat_label,
    vat_percent,
    yuan,
)
from reports.render.pdf import INK, MUTED, ReportPDF, draw_table

__all__ = ["CREDIT_NOTE_CSV_COLUMNS", "credit_note_to_dict", "render_credit_note"]

CREDIT_NOTE_CSV_COLUMNS = ("line_no", "invoice_line_no", "kind", "description", "amount")
_SELLER = ("brand", "legal_name", "address", "tax_id", "bank", "bank_account", "contact")
_BUYER = ("tenant", "display_name", "legal_name", "tax_id", "address", "email")


def _as_document(value: CreditNoteDocument | CreditNote) -> CreditNoteDocument:
    """`value` if it is a document; a bare credit note as a document with nothing around it."""
    return value if isinstance(value, CreditNoteDocument) else CreditNoteDocument(credit_note=value, invoice=None)


def credit_note_to_dict(value: CreditNoteDocument | CreditNote) -> dict[str, Any]:
    """The credit note as plain JSON-ready data; the same in every language."""
    doc = _as_document(value)
    note = doc.credit_note
    return {
        "number": note.number,
        "invoice": note.invoice,
        "tenant": note.tenant,
        "period": note.period,
        "reason": note.reason,
        "note": note.note,
        "issued_at": note.issued_at,
        "issue_date": None if doc.issue_date is None else str(doc.issue_date),
        "currency": note.currency,
        "lines": [{"line_no": line.line_no, "invoice_line_no": line.invoice_line_no, "kind": line.kind,
                   "description": line.description, "amount": money_str(line.amount)} for line in note.lines],
        "subtotal": money_str(note.subtotal),
        "tax": money_str(note.tax),
        "total": money_str(note.total),
        "vat_rate": rate_str(note.vat_rate),
    }


def credit_note_json(value: CreditNoteDocument | CreditNote) -> bytes:
    return orjson.dumps(credit_note_to_dict(value), option=orjson.OPT_INDENT_2)


def credit_note_csv(value: CreditNoteDocument | CreditNote) -> bytes:
    """One row per line, then the ``subtotal``, ``tax`` and ``total`` rows (kind, description and
    amount only), as the invoice CSV ends. Text cells a spreadsheet would run as a formula get a
    leading ``'`` (:func:`reports.render.format.csv_cell`)."""
    d = credit_note_to_dict(value)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CREDIT_NOTE_CSV_COLUMNS, lineterminator="\r\n", restval="")
    writer.writeheader()
    for line in d["lines"]:
        writer.writerow({k: csv_cell(v) for k, v in line.items()})
    for kind, description in (("subtotal", "Subtotal"), ("tax", vat_label(d["vat_rate"])), ("total", "Total")):
        writer.writerow({"kind": kind, "description": description, "amount": csv_cell(d[kind])})
    return buf.getvalue().encode("utf-8")


# ------------------------------------------------------------------------- the PDF


def _reason(pdf: ReportPDF, reason: str) -> str:
    return pdf.label(f"reason.{reason}") if reason in REASONS else reason


def _line_cell(pdf: ReportPDF, doc: CreditNoteDocument, line: dict[str, Any]) -> str:
    """What the credited line is, as the invoice's PDF says it; the stored words without the invoice."""
    lines = doc.invoice.lines if doc.invoice is not None else ()
    if 1 <= line["invoice_line_no"] <= len(lines):
        return line_text(pdf, doc, line_to_dict(lines[line["invoice_line_no"] - 1]))
    if pdf.doc_lang == "en":
        return str(line["description"] or line["kind"])
    kinds = ("rent", "electricity", "credit", "discount", "adjustment", "concession")
    return pdf.label(f"kind.{line['kind']}") if line["kind"] in kinds else str(line["kind"])


def _customer(doc: CreditNoteDocument, d: dict[str, Any]) -> str:
    """The customer by name, as the buyer block's first line names it: the legal name, else the
    display name, else (an unregistered tenant) the tenant id."""
    buyer = doc.buyer
    return (buyer.legal_name or buyer.display_name or buyer.tenant) if buyer is not None else d["tenant"]


def _outside_texts(doc: CreditNoteDocument, d: dict[str, Any]) -> list[str]:
    """Every text of the note that comes from outside (they decide whether the PDF needs the CJK font)."""
    texts = [str(d[k] or "") for k in ("number", "invoice", "tenant", "period", "reason", "note", "currency")]
    texts.extend(str(line["description"] or "") for line in d["lines"])
    for party, names in ((doc.seller, _SELLER), (doc.buyer, _BUYER)):
        if party is not None:
            texts.extend(str(getattr(party, name) or "") for name in names)
    return texts


def credit_note_pdf(value: CreditNoteDocument | CreditNote, *, lang: str = "en") -> bytes:
    """An A4 credit note labelled in `lang`; see the module docstring for what it shows, in order."""
    doc = _as_document(value)
    d = credit_note_to_dict(doc)
    brand = doc.seller.text("brand", lang) if doc.seller else UNCONFIGURED_BRAND
    pdf = ReportPDF(
        title=translate(lang, "cn.doc_title", number=d["number"]),
        footer_note=translate(lang, "cn.footer", seller=brand, number=d["number"], invoice=d["invoice"],
                              tenant=d["tenant"]),
        created_at=d["issued_at"],
        lang=lang,
        texts=[brand, *_outside_texts(doc, d)],
        author=brand,
    )
    pdf.add_page()
    width = pdf.usable_width
    draw_masthead(pdf, brand, pdf.label("cn.heading"), pdf.label("cn.tagline"))

    # seller (left), the note's facts (right), then the customer and the note
    y = pdf.get_y() + 4
    below_seller = draw_block(pdf, pdf.l_margin, y, width * 0.52, pdf.label("inv.seller"), seller_lines(pdf, doc.seller))
    below_facts = draw_facts(pdf, y, [
        (pdf.label("cn.number"), d["number"]),
        (pdf.label("cn.issue_date"), d["issue_date"] or d["issued_at"]),
        (pdf.label("cn.invoice"), d["invoice"]),
        (pdf.label("inv.period"), d["period"]),
        (pdf.label("cn.reason"), _reason(pdf, d["reason"])),
        (pdf.label("inv.currency"), d["currency"]),
    ])
    y = max(below_seller, below_facts) + 4
    below_buyer = draw_block(pdf, pdf.l_margin, y, width * 0.6, pdf.label("cn.customer"),
                             buyer_lines(pdf, doc.buyer, d["tenant"]))
    pdf.set_y(below_buyer + 4)
    if d["note"]:
        pdf.set_font("Helvetica", "", 9)
        pdf.multi_cell(0, 5, pdf.txt(pdf.label("cn.note", note=d["note"])), new_x="LMARGIN", new_y="NEXT",
                       wrapmode=pdf.wrapping())
    pdf.ln(3)

    draw_table(
        pdf,
        headings=(pdf.label("cn.line"), pdf.label("inv.description"), pdf.label("inv.amount")),
        rows=[(str(line["invoice_line_no"]), _line_cell(pdf, doc, line), grouped_money(line["amount"]))
              for line in d["lines"]],
        col_widths=(26, 124, 30),
        align=("RIGHT", "LEFT", "RIGHT"),
        font_size=8,
        wrap=(False, True, False),
    )
    pdf.ln(4)
    rate = vat_percent(d["vat_rate"])
    draw_totals(pdf, [(pdf.label("cn.subtotal"), d["subtotal"]), (pdf.label("cn.vat", rate=rate), d["tax"])],
                (pdf.label("cn.total", currency=d["currency"]), d["total"]))

    pdf.set_font("Helvetica", "B", 9)
    pdf.set_text_color(*INK)
    returns = {True: "cn.returns_prepaid", False: "cn.returns_postpaid", None: "cn.returns"}[doc.prepaid]
    pdf.multi_cell(0, 5, pdf.txt(pdf.label(returns, amount=yuan(pdf, d["total"]), customer=_customer(doc, d))),
                   new_x="LMARGIN", new_y="NEXT", wrapmode=pdf.wrapping())
    pdf.ln(4)
    pdf.set_font("Helvetica", "", 7.5)
    pdf.set_text_color(*MUTED)
    notes = pdf.label("cn.notes", currency=d["currency"], rate=rate)
    pdf.multi_cell(0, 4, pdf.txt(notes), new_x="LMARGIN", new_y="NEXT", wrapmode=pdf.wrapping())
    return bytes(pdf.output())


_RENDERERS = {"json": credit_note_json, "csv": credit_note_csv, "pdf": credit_note_pdf}


def render_credit_note(value: CreditNoteDocument | CreditNote, fmt: str, lang: str = "en") -> bytes:
    """The credit note as bytes in ``fmt`` (json, csv or pdf), labelled in `lang`
    (:data:`reports.render.i18n.LANGS`; JSON and CSV are the machine contract, the same in every language)."""
    check_lang(lang)
    render = renderer_for(_RENDERERS, fmt, "a credit note")
    return credit_note_pdf(value, lang=lang) if fmt == "pdf" else render(value)
