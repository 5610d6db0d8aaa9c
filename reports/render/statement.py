"""Statements of account (对账单, issue 38) as JSON, CSV and PDF.

What is rendered is a `reports.statement.StatementDocument` (`reports.statement.statement_document`
builds it); a bare `billing_rules.accounts.Statement` renders too, with nothing around it.

:func:`statement_to_dict` is the JSON contract: dates ``YYYY-MM-DD`` (billing time zone), money
as strings with two decimals. A balance is what the tenant owes (negative: credit it holds); an
entry's ``amount`` adds to it (an invoice, a refund paid out, a reversed payment) or, negative,
takes from it (a payment, a credit note, a write-off). ``opening_balance`` + ``charges`` (the
positive amounts) + ``credits`` (the negative ones) = ``closing_balance``, and each entry's
``balance`` is the running balance after it. ``aging`` splits the closing balance as of ``to``:
``outstanding`` − ``unapplied`` = ``closing_balance``. The CSV and PDF are written from that same
dict, so the three formats never disagree on a figure.

The PDF looks like the invoice and the credit note (`reports.render.invoice`'s masthead, party
blocks, facts and totals): seller and the statement's facts (customer id, from, to, currency);
the customer; the entries between an opening and a closing row, each with its running balance;
opening → charges → payments and credits → closing balance (on zh-CN documents also in capital
numerals); the closing balance by days past due and the credit held. Its creation date is the
statement's last day: the same statement renders to the same bytes.
"""

from __future__ import annotations

import csv
import io
from decimal import Decimal
from typing import Any

import orjson

from billing_rules.accounts import AGING_BUCKETS, Statement
from reports.render.format import csv_cell, money_str, renderer_for
from reports.render.i18n import check_lang
from reports.render.i18n import label as translate
from reports.render.invoice import (
    UNCONFIGURED_BRAND, buyer_lines, draw_block, draw_facts, draw_masthead, draw_totals, grouped_money, seller_lines,
)
from reports.render.pdf import INK, MUTED, ReportPDF, draw_table
from reports.statement import StatementDocument

__all__ = ["STATEMENT_CSV_COLUMNS", "render_statement", "statement_to_dict"]

STATEMENT_CSV_COLUMNS = ("date", "kind", "document", "description", "amount", "balance")
KINDS = ("invoice", "credit_note", "payment", "payment_reversed", "refund", "write_off", "write_off_recovered")
_SELLER = ("brand", "legal_name", "address", "tax_id", "bank", "bank_account", "contact")
_BUYER = ("tenant", "display_name", "legal_name", "tax_id", "address", "email")


def _as_document(value: StatementDocument | Statement) -> StatementDocument:
    return value if isinstance(value, StatementDocument) else StatementDocument(statement=value)


def statement_to_dict(value: StatementDocument | Statement) -> dict[str, Any]:
    """The statement as plain JSON-ready data; the same in every language."""
    doc = _as_document(value)
    s = doc.statement
    amounts = [e.amount for e in s.entries]
    return {
        "tenant": s.tenant,
        "from": str(s.start),
        "to": str(s.end),
        "currency": doc.currency,
        "opening_balance": money_str(s.opening),
        "entries": [{"date": str(e.on), "kind": e.kind, "document": e.document, "description": e.description,
                     "amount": money_str(e.amount), "balance": money_str(e.balance)} for e in s.entries],
        "charges": money_str(sum((a for a in amounts if a > 0), Decimal(0))),
        "credits": money_str(sum((a for a in amounts if a < 0), Decimal(0))),
        "closing_balance": money_str(s.closing),
        "aging": None if doc.aging is None else {k: v for k, v in doc.aging.as_dict().items() if k != "tenant"},
        "seller": None if doc.seller is None else {name: getattr(doc.seller, name) for name in _SELLER},
        "buyer": None if doc.buyer is None else {name: getattr(doc.buyer, name) for name in _BUYER},
    }


def statement_json(value: StatementDocument | Statement) -> bytes:
    return orjson.dumps(statement_to_dict(value), option=orjson.OPT_INDENT_2)


def statement_csv(value: StatementDocument | Statement) -> bytes:
    """An ``opening_balance`` row (dated the first day), one row per entry, a ``closing_balance`` row
    (dated the last day); the balance rows carry their figure in ``balance`` only. Text cells a
    spreadsheet would run as a formula get a leading ``'`` (:func:`reports.render.format.csv_cell`)."""
    d = statement_to_dict(value)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=STATEMENT_CSV_COLUMNS, lineterminator="\r\n", restval="")
    writer.writeheader()
    writer.writerow({"date": d["from"], "kind": "opening_balance", "description": "Opening balance",
                     "balance": d["opening_balance"]})
    for entry in d["entries"]:
        writer.writerow({k: csv_cell(v) for k, v in entry.items()})
    writer.writerow({"date": d["to"], "kind": "closing_balance", "description": "Closing balance",
                     "balance": d["closing_balance"]})
    return buf.getvalue().encode("utf-8")


# ------------------------------------------------------------------------- the PDF


def entry_words(lang: str, entry: dict[str, Any]) -> str:
    """What an entry is, in `lang`: the stored words in English; in Chinese the kind's name and the document."""
    if lang == "en" or entry["kind"] not in KINDS:
        return str(entry["description"])
    return translate(lang, f"st.kind.{entry['kind']}", document=entry["document"])


def _outside_texts(d: dict[str, Any]) -> list[str]:
    """Every text of the statement that comes from outside (they decide whether the PDF needs the CJK font)."""
    texts = [d["tenant"], d["currency"]]
    for entry in d["entries"]:
        texts += [entry["document"], entry["description"]]
    for block in ("seller", "buyer"):
        texts.extend(str(v) for v in (d[block] or {}).values() if v)
    return texts


def statement_pdf(value: StatementDocument | Statement, *, lang: str = "en") -> bytes:
    """An A4 statement of account labelled in `lang`; see the module docstring for what it shows, in order."""
    doc = _as_document(value)
    d = statement_to_dict(doc)
    brand = doc.seller.text("brand", lang) if doc.seller else UNCONFIGURED_BRAND
    pdf = ReportPDF(
        title=translate(lang, "st.doc_title", tenant=d["tenant"], start=d["from"], end=d["to"]),
        footer_note=translate(lang, "st.footer", seller=brand, tenant=d["tenant"], start=d["from"], end=d["to"]),
        created_at=f"{d['to']}T00:00:00Z",
        lang=lang,
        texts=[brand, *_outside_texts(d)],
        author=brand,
    )
    pdf.add_page()
    width = pdf.usable_width
    draw_masthead(pdf, brand, pdf.label("st.heading"), pdf.label("st.tagline"))

    y = pdf.get_y() + 4
    below_seller = draw_block(pdf, pdf.l_margin, y, width * 0.52, pdf.label("inv.seller"),
                              seller_lines(pdf, doc.seller))
    below_facts = draw_facts(pdf, y, [
        (pdf.label("st.customer_id"), d["tenant"]),
        (pdf.label("st.from"), d["from"]),
        (pdf.label("st.to"), d["to"]),
        (pdf.label("inv.currency"), d["currency"]),
    ])
    y = max(below_seller, below_facts) + 4
    below_buyer = draw_block(pdf, pdf.l_margin, y, width * 0.6, pdf.label("cn.customer"),
                             buyer_lines(pdf, doc.buyer, d["tenant"]))
    pdf.set_y(below_buyer + 5)

    rows = [(d["from"], "", pdf.label("st.opening"), "", grouped_money(d["opening_balance"]))]
    rows += [(e["date"], e["document"], entry_words(lang, e), grouped_money(e["amount"]), grouped_money(e["balance"]))
             for e in d["entries"]]
    if not d["entries"]:
        rows.append(("", "", pdf.label("st.no_entries"), "", ""))
    draw_table(
        pdf,
        headings=tuple(pdf.label(k) for k in ("st.date", "st.document", "inv.description", "st.amount", "st.balance")),
        rows=rows,
        col_widths=(22, 32, 70, 28, 28),
        align=("LEFT", "LEFT", "LEFT", "RIGHT", "RIGHT"),
        font_size=8,
        total=(d["to"], "", pdf.label("st.closing"), "", grouped_money(d["closing_balance"])),
    )
    pdf.ln(4)
    draw_totals(pdf, [(pdf.label("st.opening"), d["opening_balance"]), (pdf.label("st.charges"), d["charges"]),
                      (pdf.label("st.credits"), d["credits"])],
                (pdf.label("st.closing_total", currency=d["currency"]), d["closing_balance"]))
    _aging(pdf, d)
    pdf.set_font("Helvetica", "", 7.5)
    pdf.set_text_color(*MUTED)
    pdf.multi_cell(0, 4, pdf.txt(pdf.label("st.notes", currency=d["currency"])), new_x="LMARGIN", new_y="NEXT",
                   wrapmode=pdf.wrapping())
    return bytes(pdf.output())


def _aging(pdf: ReportPDF, d: dict[str, Any]) -> None:
    """The closing balance by days past due, and the credit held (nothing when the aging is not known)."""
    aging = d["aging"]
    if aging is None:
        return
    pdf.set_font("Helvetica", "B", 9)
    pdf.set_text_color(*INK)
    pdf.multi_cell(0, 5, pdf.txt(pdf.label("st.aging", date=d["to"])), new_x="LMARGIN", new_y="NEXT",
                   wrapmode=pdf.wrapping())
    draw_table(
        pdf,
        headings=tuple(pdf.label(f"st.bucket.{name}") for name in (*AGING_BUCKETS, "outstanding", "unapplied")),
        rows=[tuple(grouped_money(aging[name]) for name in (*AGING_BUCKETS, "outstanding", "unapplied"))],
        col_widths=(25,) * 7,
        align=("RIGHT",) * 7,
        font_size=8,
    )
    pdf.ln(4)


_RENDERERS = {"json": statement_json, "csv": statement_csv, "pdf": statement_pdf}


def render_statement(value: StatementDocument | Statement, fmt: str, lang: str = "en") -> bytes:
    """The statement as bytes in ``fmt`` (json, csv or pdf), labelled in `lang`
    (:data:`reports.render.i18n.LANGS`; JSON and CSV are the machine contract, the same in every language)."""
    check_lang(lang)
    render = renderer_for(_RENDERERS, fmt, "a statement")
    return statement_pdf(value, lang=lang) if fmt == "pdf" else render(value)
