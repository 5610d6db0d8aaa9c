"""Invoices (SPEC §5, §8) as JSON, CSV and PDF.

What is rendered is a `reports.invoice_model.InvoiceDocument` (`reports.invoice_document`
builds it): the stored `billing_rules.IssuedInvoice` with its seller, buyer, issue date,
service period, settlement and the credit left. A bare invoice renders too (as a document
with nothing around it: tests and stand-ins); its lines are `billing_rules.InvoiceLine`s,
the one line shape that is built, stored and rendered.

:func:`invoice_to_dict` is the contract of ``gpubill invoice show --format json``: money
as strings with two decimals, quantities with at least six, unit prices with six, PUE and
VAT rate as short decimals; each charge line also has its ``list_price`` as the rules
write it (``10.00`` per ``GPU-hour``, ``3180.00`` per ``month``, ``0.33`` per ``kWh``).
The CSV and PDF are written from that same dict, so the three formats can never disagree
on a figure.

The PDF reads top to bottom as a finance team expects: seller and document facts (number,
issue date in the billing zone, service period, due date or prepaid settlement, payment
terms); the buyer; the charges (rent, electricity, adjustments) with unit prices as the
price is written; then subtotal → each discount, concession (a goodwill credit note a
replacement carries, named by its number) and credit by name → net → VAT → total
(on zh-CN documents also in capital numerals); what is due or how it was settled; the
credit left after this invoice.

Its lifecycle is marked where a reader looks first: a draft is headed DRAFT INVOICE / 账单（草稿）
with a banner (no number yet, nothing due), its number field shows the draft id; a voided
invoice is headed VOID INVOICE / 账单（已作废） and names its replacement once there is one; a
replacement says which invoice it replaces; the credit notes on an invoice are listed by number.

The PDF's pieces (masthead, party blocks, facts, totals) are shared with the credit note
(`reports.render.credit_note`), so both documents look alike.
"""

from __future__ import annotations

import csv
import io
import re
from typing import Any

import orjson

from billing_rules import IssuedInvoice
from reports.invoice_model import InvoiceDocument, as_document
from reports.render.chinese_amount import rmb_capitals
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
from reports.render.i18n import band_name, check_lang, plan_name, unit_name
from reports.render.i18n import label as translate
from reports.render.pdf import ACCENT, INK, MUTED, RULE, ReportPDF, draw_table, fit_text

__all__ = ["GROUPING_FIELDS", "INVOICE_CSV_COLUMNS", "invoice_to_dict", "line_to_dict", "line_words", "render_invoice"]

# The pieces `reports.render.credit_note` draws with (not exported from the package):
#   buyer_lines, seller_lines, draw_block, draw_facts, draw_masthead, draw_totals, line_text, vat_percent, yuan

GROUPING_FIELDS = ("gpu_model", "plan", "site", "band", "pue", "ref_period", "credit_id")
INVOICE_CSV_COLUMNS = ("kind", *GROUPING_FIELDS, "description", "quantity", "unit", "unit_price", "amount")
UNCONFIGURED_BRAND = "gpubill"  # a rule set without a [seller]: the documents say it is not configured
_CHARGES = ("rent", "electricity", "adjustment")  # the line table; discounts and credits follow the subtotal


def _opt(value: Any, fmt: Any) -> Any:
    return None if value is None else fmt(value)


def _list_price(line: Any, period_hours: Any) -> tuple[str, str] | None:
    """(price, per) as the rules write it: a monthly plan's per-hour price × the period's hours."""
    if line.kind not in ("rent", "discount", "electricity") or line.unit_price is None:
        return None
    if line.kind == "electricity":
        return rate_str(line.unit_price), "kWh"
    if line.plan == "monthly" and period_hours:
        return money_str(as_decimal(line.unit_price) * period_hours), "month"
    return rate_str(line.unit_price), "GPU-hour"


def line_to_dict(line: Any, period_hours: Any = None) -> dict[str, Any]:
    """One line as JSON-ready data (the invoice's, and the usage report's charges); `period_hours`
    lets a monthly plan's list price be written per month."""
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
    listed = _list_price(line, period_hours)
    if listed:
        d["list_price"], d["list_price_unit"] = listed
    return d


def _sum_of(inv: Any, kind: str) -> str:
    return money_str(sum((as_decimal(line.amount) for line in inv.lines if line.kind == kind), as_decimal(0)))


def invoice_to_dict(value: InvoiceDocument | IssuedInvoice) -> dict[str, Any]:
    """The invoice as plain JSON-ready data, keys in the order of the CLI contract, then the document's."""
    doc = as_document(value)
    inv = doc.invoice
    seller, buyer, settlement = doc.seller, doc.buyer, doc.settlement
    return {
        "tenant": inv.tenant,
        "period": inv.period,
        "number": inv.number,
        "status": plain(inv.status),
        "issued_at": inv.issued_at,
        "issue_date": _opt(doc.issue_date, str),
        "service_period": {"start": str(doc.service_start), "end": str(doc.service_end)} if doc.service_start else None,
        # the due date it was issued with (a voided invoice asks nothing: none)
        "due_date": _opt(doc.payment.due_on if doc.payment is not None and inv.status == "issued"
                         else (settlement.due_date if settlement else None), str),
        "seller": None if seller is None else {
            name: getattr(seller, name) for name in ("brand", "legal_name", "address", "tax_id", "bank", "bank_account",
                                                     "contact")},
        "buyer": None if buyer is None else {
            name: getattr(buyer, name) for name in ("tenant", "display_name", "legal_name", "tax_id", "address", "email")},
        "currency": inv.currency,
        "lines": [line_to_dict(line, doc.period_hours) for line in inv.lines],
        "subtotal": money_str(inv.subtotal),
        "discount": _sum_of(inv, "discount"),
        "credit": _sum_of(inv, "credit"),
        "concession": _sum_of(inv, "concession"),  # goodwill notes a replacement carries (issue 36)
        "net": money_str(inv.net),
        "tax": money_str(inv.tax),
        "total": money_str(inv.total),
        "vat_rate": rate_str(inv.vat_rate),
        "prepaid": None if settlement is None else settlement.prepaid,
        "amount_due": None if settlement is None else money_str(settlement.amount_due),
        "balance_after": _opt(settlement.balance_after if settlement else None, money_str),
        "credit_left": [{"id": c.id, "reason": c.reason, "remaining": money_str(c.remaining),
                         "expires_period": c.expires_period} for c in doc.credits_left],
        # the lifecycle (issue 24): the document's id (a draft's DRAFT-…, else its number), what it
        # replaces, what replaced it (a voided invoice) and the numbers of its credit notes
        "id": getattr(inv, "id", "") or inv.number,
        "replaces": getattr(inv, "replaces", ""),
        "replaced_by": doc.replaced_by,
        "credit_notes": list(doc.credit_notes),
        "rules_revision": getattr(inv, "rules_revision", ""),  # the rule set that priced it (issue 25)
        **payment_fields(doc.payment),
    }


def payment_fields(state: Any) -> dict[str, Any]:
    """What an issued invoice has been paid and still asks today (issue 38; billing_rules.accounts.InvoiceState),
    derived from the allocations, never stored; all null for a draft."""
    if state is None:
        return {"paid": None, "credited": None, "written_off": None, "outstanding": None, "payment_state": None,
                "overdue": None}
    return {"paid": money_str(state.paid), "credited": money_str(state.credited),
            "written_off": money_str(state.written_off), "outstanding": money_str(state.outstanding),
            "payment_state": state.payment_state, "overdue": state.overdue}


def invoice_json(value: InvoiceDocument | IssuedInvoice) -> bytes:
    return orjson.dumps(invoice_to_dict(value), option=orjson.OPT_INDENT_2)


# (key of the dict, the row's kind, its description): a line's kinds "discount" and "credit" are not reused
_CSV_TOTALS = (("subtotal", "subtotal", "Subtotal"), ("discount", "discounts", "Discounts"),
               ("concession", "concessions", "Concessions"), ("credit", "credits", "Credits"), ("net", "net", "Net"), ("tax", "tax", None), ("total", "total", "Total"),
               ("amount_due", "amount_due", "Amount due"))


def invoice_csv(value: InvoiceDocument | IssuedInvoice) -> bytes:
    """One row per line, then the ``subtotal``, ``discounts``, (``concessions``, on a replacement
    carrying one,) ``credits``, ``net``, ``tax``, ``total`` and (for a document) ``amount_due`` rows
    (amount only).

    Text cells a spreadsheet would run as a formula get a leading ``'``; amounts such as
    ``-10.00`` stay numbers (:func:`reports.render.format.csv_cell`).
    """
    doc = as_document(value)
    d = invoice_to_dict(doc)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=INVOICE_CSV_COLUMNS, lineterminator="\r\n", restval="", extrasaction="ignore")
    writer.writeheader()
    for line in d["lines"]:
        writer.writerow({k: ("" if v is None else csv_cell(v)) for k, v in line.items()})
    for key, kind, description in _CSV_TOTALS:
        if key == "concession" and not any(line["kind"] == "concession" for line in d["lines"]):
            continue  # a row only on a replacement that carries a concession
        if d[key] is not None:
            writer.writerow({"kind": kind, "description": description or vat_label(doc.invoice.vat_rate),
                             "amount": csv_cell(d[key])})
    return buf.getvalue().encode("utf-8")


def vat_label(rate: Any) -> str:
    """``Decimal("0.06") -> "VAT 6%"``, ``Decimal("0.065") -> "VAT 6.5%"``: the CSV's words (every language)."""
    return f"VAT {vat_percent(rate)}%"


def vat_percent(rate: Any) -> str:
    """``Decimal("0.06") -> "6"``, ``Decimal("0.065") -> "6.5"``."""
    return f"{(as_decimal(rate) * 100).normalize():f}"


def grouped_money(text: str) -> str:
    sign, digits = ("-", text[1:]) if text.startswith("-") else ("", text)
    whole, _, frac = digits.partition(".")
    return f"{sign}{int(whole):,}.{frac}"


def yuan(pdf: ReportPDF, text: str) -> str:
    """An amount for people: ``¥1,234.50`` (``-¥10.00``); latin-1 documents write ``CNY 1,234.50`` (``CNY -10.00``)."""
    grouped = grouped_money(text)
    sign, digits = ("-", grouped[1:]) if grouped.startswith("-") else ("", grouped)
    return f"{sign}¥{digits}" if pdf.cjk else f"CNY {sign}{digits}"


# ------------------------------------------------------------------------- line texts


_DISCOUNT_PCT = re.compile(r"discount ([0-9]+(?:\.[0-9]+)?) %")


def _what(lang: str, doc: InvoiceDocument | Any, line: dict[str, Any]) -> str:
    """A rent or electricity charge in words: "A800-80G GPU rent, monthly plan" / "电费：贵州贵安，单一电价"."""
    if "site" in line:
        band = str(line.get("band", ""))
        return translate(lang, "line.electricity", site=doc.name(lang, "site", line["site"]) or line["site"],
                         band=doc.name(lang, "band", f"{line['site']}/{band}") or band_name(lang, band))
    return translate(lang, "line.rent", model=line.get("gpu_model", ""), plan=plan_name(lang, str(line.get("plan", ""))))


def line_words(lang: str, doc: InvoiceDocument | Any, line: dict[str, Any]) -> str:
    """What a line (as :func:`line_to_dict` writes it) is, in `lang`, from its fields and the rules'
    names (`doc.name(lang, kind, key)`: an invoice's or a credit note's document): the one place a
    line is named — the invoice's PDF, the credit note's and `gpubill rerate`'s lines say this."""
    kind = line["kind"]
    if kind in ("rent", "electricity"):
        return _what(lang, doc, line)
    if kind == "discount":
        pct = _DISCOUNT_PCT.search(str(line.get("description", "")))
        return translate(lang, "line.discount", pct=pct.group(1) if pct else "", what=_what(lang, doc, line))
    if kind == "credit":
        stored = str(line.get("description") or "")
        if lang != "en" and re.search("[A-Za-z]", stored):
            stored = ""  # an English reason on a Chinese document: the kind's own word instead
        return doc.name(lang, "credit", line.get("credit_id")) or stored or translate(lang, "kind.credit")
    if kind == "concession":  # a goodwill credit note a replacement carries (billing_rules/concessions.py)
        return translate(lang, "line.concession", note=line.get("credit_id", ""))
    if kind == "adjustment":
        what = _what(lang, doc, line) if ("gpu_model" in line or "site" in line) else (
            str(line.get("description") or "") if lang == "en" else translate(lang, "kind.adjustment"))
        return translate(lang, "line.adjustment", period=line.get("ref_period", ""), what=what)
    return translate(lang, f"kind.{kind}") if kind in _KINDS else str(kind)


def line_text(pdf: ReportPDF, doc: InvoiceDocument | Any, line: dict[str, Any]) -> str:
    """:func:`line_words` in the PDF's language."""
    return line_words(pdf.doc_lang, doc, line)


_KINDS = ("rent", "electricity", "credit", "discount", "adjustment", "concession")


def _line_detail(pdf: ReportPDF, line: dict[str, Any]) -> str:
    details = []
    if "pue" in line:
        details.append(pdf.label("detail.pue", value=line["pue"]))
    if line["kind"] != "adjustment" and "ref_period" in line:
        details.append(pdf.label("detail.ref_period", value=line["ref_period"]))
    return ", ".join(details)


def _price_cell(pdf: ReportPDF, line: dict[str, Any]) -> str:
    """The unit price as the price is written: ¥10.00/GPU-hour, ¥3,180.00/month, ¥0.33/kWh."""
    if "list_price" in line:
        price, per = line["list_price"], line["list_price_unit"]
    elif line.get("unit"):  # an adjustment of a rent or electricity line: its per-unit price
        price, per = rate_str(line["unit_price"]), line["unit"]
    else:
        return ""
    return f"{yuan(pdf, price)}/{unit_name(pdf.doc_lang, per)}"


def _quantity_cell(pdf: ReportPDF, line: dict[str, Any]) -> tuple[str, str]:
    unit = line.get("unit") or ""
    if not unit:
        return "", ""
    return line["quantity"], unit_name(pdf.doc_lang, unit)


# ------------------------------------------------------------------------- the PDF


def _outside_texts(d: dict[str, Any]) -> list[str]:
    """Every text of the invoice that comes from outside (they decide whether the PDF needs the CJK font)."""
    texts = [str(d[k] or "") for k in ("tenant", "period", "number", "status", "issued_at", "currency", "id",
                                       "replaces", "replaced_by")]
    texts.extend(d["credit_notes"])
    for block in ("seller", "buyer"):
        texts.extend(str(v) for v in (d[block] or {}).values() if v)
    for line in d["lines"]:
        texts.extend(str(v) for v in line.values() if v is not None)
    texts.extend(str(c["reason"]) for c in d["credit_left"])
    return texts


# a status as the document says it; "finalized" is what invoices were called before drafts existed
_STATUS_LABELS = {"draft": "status.draft", "issued": "status.issued", "finalized": "status.issued",
                  "voided": "status.voided"}


def _facts(pdf: ReportPDF, doc: InvoiceDocument, d: dict[str, Any]) -> list[tuple[str, str]]:
    settlement = doc.settlement
    status = str(d["status"] or "")
    if status == "draft":  # no number and no issue date yet: the draft id, and when it was drafted
        facts = [(pdf.label("inv.number"), pdf.label("inv.draft_number", id=d["id"]) if d["id"]
                  else pdf.label("inv.not_numbered")),
                 (pdf.label("inv.issue_date"), pdf.label("inv.not_issued"))]
        if d["issue_date"]:
            facts.append((pdf.label("inv.drafted"), d["issue_date"]))
    else:
        facts = [(pdf.label("inv.number"), d["number"] or pdf.label("inv.not_numbered")),
                 (pdf.label("inv.issue_date"), d["issue_date"] or d["issued_at"] or pdf.label("inv.not_issued"))]
    if d["service_period"]:
        facts.append((pdf.label("inv.service_period"),
                      f"{d['service_period']['start']} - {d['service_period']['end']}"))
    facts.append((pdf.label("inv.period"), d["period"]))
    if settlement is not None:
        if settlement.prepaid:
            facts.append((pdf.label("inv.terms"), pdf.label("inv.terms_prepaid")))
        else:
            facts.append((pdf.label("inv.terms"), pdf.label("inv.terms_days", days=_terms_days(doc))))
        if settlement.due_date is not None:
            facts.append((pdf.label("inv.due_date"), str(settlement.due_date)))
    facts.append((pdf.label("inv.status"), pdf.label(_STATUS_LABELS[status]) if status in _STATUS_LABELS
                  else status or "-"))
    facts.append((pdf.label("inv.currency"), d["currency"]))
    return facts


def _terms_days(doc: InvoiceDocument) -> int:
    settlement = doc.settlement
    if settlement is None or settlement.due_date is None or doc.issue_date is None:
        return 0
    return (settlement.due_date - doc.issue_date).days


def seller_lines(pdf: ReportPDF, seller: Any) -> list[str]:
    """The seller block's lines (billing.toml [seller]) in the document's language; None: it is not configured."""
    if seller is None:
        return [pdf.label("inv.no_seller")]
    lang = pdf.doc_lang
    lines = [seller.text("legal_name", lang), seller.text("address", lang), pdf.label("party.tax_id", value=seller.tax_id)]
    if seller.bank:
        lines.append(pdf.label("party.bank", bank=seller.text("bank", lang), account=seller.bank_account or ""))
    lines.append(pdf.label("party.contact", value=seller.contact))
    return [str(x) for x in lines if x]


def buyer_lines(pdf: ReportPDF, buyer: Any, tenant: str) -> list[str]:
    """The buyer block's lines (the tenant registry's row); None: the tenant id only."""
    if buyer is None:
        return [pdf.label("party.tenant", value=tenant)]
    lines = [buyer.legal_name or buyer.display_name or buyer.tenant]
    if buyer.display_name and buyer.legal_name:
        lines.append(buyer.display_name)
    lines.append(pdf.label("party.tenant", value=buyer.tenant))
    lines.append(pdf.label("party.tax_id", value=buyer.tax_id) if buyer.tax_id else pdf.label("party.no_tax_id"))
    if buyer.address:
        lines.append(buyer.address)
    if buyer.email:
        lines.append(pdf.label("party.email", value=buyer.email))
    return lines


def draw_block(pdf: ReportPDF, x: float, y: float, width: float, title: str, lines: list[str]) -> float:
    """A titled block of text lines at (x, y); returns the y below it."""
    pdf.set_xy(x, y)
    pdf.set_font("Helvetica", "", 7.5)
    pdf.set_text_color(*MUTED)
    pdf.cell(width, 4, pdf.txt(title), new_x="LEFT", new_y="NEXT")
    pdf.set_text_color(*INK)
    for i, text in enumerate(lines):
        pdf.set_x(x)
        pdf.set_font("Helvetica", "B" if i == 0 else "", 10 if i == 0 else 8)
        pdf.multi_cell(width, 5 if i == 0 else 4, pdf.txt(text), new_x="LEFT", new_y="NEXT",
                       wrapmode=pdf.wrapping())
    return pdf.get_y()


def draw_masthead(pdf: ReportPDF, brand: str, heading: str, tagline: str) -> None:
    """The brand (left) and the document's name (right) over the tagline, then the accent rule."""
    width = pdf.usable_width
    top = pdf.get_y()
    pdf.set_font("Helvetica", "B", 15)
    pdf.set_text_color(*ACCENT)
    pdf.cell(width / 2, 8, pdf.txt(brand))
    pdf.set_font("Helvetica", "B", 22)
    pdf.set_text_color(*INK)
    pdf.cell(width / 2, 8, pdf.txt(heading), align="R", new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Helvetica", "", 8)
    pdf.set_text_color(*MUTED)
    pdf.cell(width / 2, 4.5, pdf.txt(tagline))
    pdf.set_text_color(*INK)
    pdf.set_y(top + 15)
    pdf.set_draw_color(*ACCENT)
    pdf.set_line_width(0.6)
    pdf.line(pdf.l_margin, pdf.get_y(), pdf.l_margin + width, pdf.get_y())


def draw_facts(pdf: ReportPDF, y: float, facts: list[tuple[str, str]]) -> float:
    """The document's facts (label, value), one a row, in the right-hand column from `y`; returns the y below."""
    width = pdf.usable_width
    pdf.set_y(y)
    for label, value in facts:
        pdf.set_x(pdf.l_margin + width * 0.54)
        pdf.set_font("Helvetica", "", 8)
        pdf.set_text_color(*MUTED)
        pdf.cell(width * 0.15, 5, fit_text(pdf, label, width * 0.15 - 0.5))
        pdf.set_font("Helvetica", "B", 8)
        pdf.set_text_color(*INK)
        pdf.cell(width * 0.31, 5, fit_text(pdf, value, width * 0.31 - 1), align="R", new_x="LMARGIN", new_y="NEXT")
    return pdf.get_y()


def _notice(pdf: ReportPDF, lines: list[str], fill: tuple[int, int, int], ink: tuple[int, int, int]) -> None:
    """A full-width band of text (the first line bold) on `fill`: a draft's or a voided invoice's mark."""
    pdf.set_fill_color(*fill)
    pdf.set_text_color(*ink)
    for i, text in enumerate(lines):
        pdf.set_font("Helvetica", "B" if i == 0 else "", 10 if i == 0 else 8.5)
        pdf.multi_cell(0, 6 if i == 0 else 5, pdf.txt(text), fill=True, new_x="LMARGIN", new_y="NEXT",
                       wrapmode=pdf.wrapping(), padding=(0.5, 2) if i == 0 else (0, 2, 0.5, 2))
    pdf.set_text_color(*INK)


def _lifecycle(pdf: ReportPDF, d: dict[str, Any]) -> None:
    """Below the masthead: DRAFT or VOID (with its replacement) in a band, and what this invoice replaces."""
    status = d["status"]
    y = pdf.get_y()
    pdf.set_y(y + 3)
    if status == "draft":
        _notice(pdf, [pdf.label("inv.draft_banner"), pdf.label("inv.draft_terms")], DRAFT_FILL, DRAFT_INK)
    elif status == "voided":
        after = pdf.label("inv.replaced_by", number=d["replaced_by"]) if d["replaced_by"] else pdf.label("inv.not_replaced")
        _notice(pdf, [pdf.label("inv.void_banner"), after], VOID_FILL, VOID_INK)
    if d["replaces"]:
        pdf.set_font("Helvetica", "B", 9)
        pdf.multi_cell(0, 5, pdf.txt(pdf.label("inv.replaces", number=d["replaces"])), new_x="LMARGIN", new_y="NEXT",
                       wrapmode=pdf.wrapping())
    if pdf.get_y() == y + 3:
        pdf.set_y(y)


DRAFT_FILL, DRAFT_INK = (255, 243, 205), (133, 100, 4)  # amber: not final yet
VOID_FILL, VOID_INK = (248, 215, 218), (132, 32, 41)  # red: not to be paid


def _heading(status: str) -> str:
    return {"draft": "inv.heading_draft", "voided": "inv.heading_voided"}.get(status, "inv.heading")


def invoice_pdf(value: InvoiceDocument | IssuedInvoice, *, lang: str = "en") -> bytes:
    """An A4 invoice labelled in `lang`; see the module docstring for what it shows, in order."""
    doc = as_document(value)
    d = invoice_to_dict(doc)
    brand = doc.seller.text("brand", lang) if doc.seller else UNCONFIGURED_BRAND
    number_text = d["number"] or (translate(lang, "inv.draft_title", id=d["id"]) if d["id"]
                                  else translate(lang, "inv.draft"))
    pdf = ReportPDF(
        title=translate(lang, "inv.doc_title", number=number_text),
        footer_note=translate(lang, "inv.footer", seller=brand, number=number_text, tenant=d["tenant"],
                              period=d["period"]),
        created_at=d["issued_at"],
        lang=lang,
        texts=[brand, *_outside_texts(d)],
        author=brand,
    )
    pdf.add_page()
    width = pdf.usable_width
    draw_masthead(pdf, brand, pdf.label(_heading(str(d["status"] or ""))), pdf.label("inv.tagline"))
    _lifecycle(pdf, d)

    # seller (left), the document's facts (right), then the buyer
    y = pdf.get_y() + 4
    below_seller = draw_block(pdf, pdf.l_margin, y, width * 0.52, pdf.label("inv.seller"), seller_lines(pdf, doc.seller))
    below_facts = draw_facts(pdf, y, _facts(pdf, doc, d))
    y = max(below_seller, below_facts) + 4
    below_buyer = draw_block(pdf, pdf.l_margin, y, width * 0.6, pdf.label("inv.bill_to"),
                             buyer_lines(pdf, doc.buyer, doc.invoice.tenant))
    pdf.set_y(below_buyer + 5)

    # the charges
    rows = []
    for line in d["lines"]:
        if line["kind"] not in _CHARGES:
            continue
        main, detail = line_text(pdf, doc, line), _line_detail(pdf, line)
        quantity, unit = _quantity_cell(pdf, line)
        rows.append((f"{main}\n{detail}" if detail else main, quantity, unit, _price_cell(pdf, line),
                     grouped_money(line["amount"])))
    draw_table(
        pdf,
        headings=tuple(pdf.label(k) for k in ("inv.description", "inv.quantity", "inv.unit", "inv.unit_price",
                                              "inv.amount")),
        rows=rows,
        col_widths=(78, 26, 16, 36, 24),
        align=("LEFT", "RIGHT", "LEFT", "RIGHT", "RIGHT"),
        font_size=8,
        wrap=(True, False, False, False, False),
    )
    pdf.ln(4)
    _totals(pdf, doc, d)
    _settlement(pdf, doc, d)

    pdf.set_font("Helvetica", "", 7.5)
    pdf.set_text_color(*MUTED)
    notes = pdf.label("inv.notes", currency=d["currency"], vat=pdf.label("inv.vat", rate=vat_percent(doc.invoice.vat_rate)))
    pdf.multi_cell(0, 4, pdf.txt(notes), new_x="LMARGIN", new_y="NEXT", wrapmode=pdf.wrapping())
    return bytes(pdf.output())


def _totals(pdf: ReportPDF, doc: InvoiceDocument, d: dict[str, Any]) -> None:
    """subtotal → each discount, concession and credit, named → net → VAT → total (and its capitals in Chinese)."""
    rows: list[tuple[str, str]] = [(pdf.label("inv.subtotal"), d["subtotal"])]
    for line in d["lines"]:
        if line["kind"] in ("discount", "concession", "credit"):
            rows.append((line_text(pdf, doc, line), line["amount"]))
    rows += [(pdf.label("inv.net"), d["net"]),
             (pdf.label("inv.vat", rate=vat_percent(doc.invoice.vat_rate)), d["tax"])]
    draw_totals(pdf, rows, (pdf.label("inv.total", currency=d["currency"]), d["total"]))


def draw_totals(pdf: ReportPDF, rows: list[tuple[str, str]], total: tuple[str, str]) -> None:
    """Right-aligned (label, amount) rows, a rule, then the total on a band; on a zh-CN document
    the total also in capital numerals (大写). Amounts are two-decimal strings."""
    if pdf.get_y() > pdf.h - 75:
        pdf.add_page()
    x_label, w_label, w_value = pdf.l_margin + pdf.usable_width - 122, 92, 30
    for label, value in rows:
        pdf.set_x(x_label)
        pdf.set_font("Helvetica", "", 9)
        pdf.cell(w_label, 6, fit_text(pdf, label, w_label - 1))
        pdf.cell(w_value, 6, pdf.txt(yuan(pdf, value)), align="R", new_x="LMARGIN", new_y="NEXT")
    pdf.set_draw_color(*RULE)
    pdf.set_line_width(0.3)
    pdf.line(x_label, pdf.get_y() + 0.5, x_label + w_label + w_value, pdf.get_y() + 0.5)
    pdf.ln(1.5)
    pdf.set_x(x_label)
    pdf.set_fill_color(226, 234, 244)
    pdf.set_font("Helvetica", "B", 11)
    pdf.cell(w_label, 8, pdf.txt(total[0]), fill=True)
    pdf.cell(w_value, 8, pdf.txt(yuan(pdf, total[1])), align="R", fill=True, new_x="LMARGIN", new_y="NEXT")
    if pdf.doc_lang == "zh-CN":
        pdf.set_x(x_label)
        pdf.set_font("Helvetica", "", 9)
        pdf.cell(w_label + w_value, 6, pdf.txt(pdf.label("inv.total_words", words=rmb_capitals(as_decimal(total[1])))),
                 align="R", new_x="LMARGIN", new_y="NEXT")
    pdf.ln(5)


def _settlement(pdf: ReportPDF, doc: InvoiceDocument, d: dict[str, Any]) -> None:
    """What is due, or how the invoice was settled, the credit left after it and its credit notes."""
    settlement = doc.settlement
    lines = []
    if settlement is not None:
        if settlement.prepaid:
            lines.append(pdf.label("pay.prepaid", balance=yuan(pdf, d["balance_after"])))
            if not settlement.settled:
                lines.append(pdf.label("pay.shortfall", amount=yuan(pdf, d["amount_due"]), date=d["due_date"]))
        elif settlement.settled:
            lines.append(pdf.label("pay.nothing_due"))
        else:
            lines.append(pdf.label("pay.due", amount=yuan(pdf, d["amount_due"]), date=d["due_date"]))
            if doc.seller is not None and doc.seller.bank:
                lines.append(pdf.label("pay.to", bank=doc.seller.text("bank", pdf.doc_lang),
                                       account=doc.seller.bank_account or "", number=d["number"]))
    used = d["credit"] != "0.00"
    if d["status"] in ("draft", "voided"):
        pass  # the credit left counts issued invoices only: "after this invoice" would not be true of these
    elif doc.credits_left:
        left = "; ".join(f"{_credit_reason(pdf, doc, c)} {yuan(pdf, money_str(c.remaining))}" for c in doc.credits_left)
        lines.append(pdf.label("pay.credit_left", credits=left))
    elif used:
        lines.append(pdf.label("pay.no_credit_left"))
    if d["credit_notes"]:
        lines.append(pdf.label("inv.credit_notes", numbers=pdf.label("list.sep").join(d["credit_notes"])))
    if not lines:
        return
    pdf.set_font("Helvetica", "B", 9)
    pdf.set_text_color(*INK)
    for text in lines:
        pdf.multi_cell(0, 5, pdf.txt(text), new_x="LMARGIN", new_y="NEXT", wrapmode=pdf.wrapping())
        pdf.set_font("Helvetica", "", 8.5)
    pdf.ln(4)


def _credit_reason(pdf: ReportPDF, doc: InvoiceDocument, credit: Any) -> str:
    if pdf.doc_lang != "en":
        return doc.name(pdf.doc_lang, "credit", credit.id) or pdf.label("kind.credit")
    return credit.reason or pdf.label("kind.credit")


_RENDERERS = {"json": invoice_json, "csv": invoice_csv, "pdf": invoice_pdf}


def render_invoice(value: InvoiceDocument | IssuedInvoice, fmt: str, *, lang: str = "en") -> bytes:
    """The invoice as bytes in ``fmt`` (json, csv or pdf), labelled in `lang`
    (:data:`reports.render.i18n.LANGS`; JSON and CSV are the machine contract, the same in every language)."""
    check_lang(lang)
    render = renderer_for(_RENDERERS, fmt, "an invoice")
    return invoice_pdf(value, lang=lang) if fmt == "pdf" else render(value)
