"""Credit notes, drafts and voided invoices as their documents say them (issue 24): JSON and CSV
field by field, and each PDF read back with PDFium in both languages. Pages are kept under
tests/artifacts/documents/ to look at.

The usage is tests/unit/test_balances.py's fixture, invoiced at APRIL_2 (08:00, 2 April in
Shanghai); tenants are invoiced in name order, so acme's invoice is GB-2026-000001 and beta's
GB-2026-000002:

    beta  line 1 rent ¥800.00, line 2 discount −¥80.00, line 3 trial credit −¥10.00
          net ¥710.00, VAT 6 % ¥42.60, total ¥752.60 (tests/unit/test_documents_read.py)

    CN-2026-000001  goodwill, ¥5.00 of line 1, at APRIL_3 (2026-04-03 in Shanghai)
                    VAT: round(5.00 × 0.06) = ¥0.30 → total ¥5.30
    CN-2026-000002  the void at APRIL_4: what is left of line 1, 800.00 − 5.00 = ¥795.00, and the
                    discount and credit given back, −¥80.00 and −¥10.00 → ¥705.00 (= 710.00 − 5.00)
                    VAT on the running total: round(710.00 × 0.06) − round(5.00 × 0.06)
                    = 42.60 − 0.30 = ¥42.30 → total ¥747.30; both notes 5.30 + 747.30 = ¥752.60
    GB-2026-000003  the replacement, issued by the next run: the same usage, the goodwill carried as
                    a concession (issue 36), the trial credit free again: 800.00 − 80.00 − 5.00
                    − 10.00 = ¥705.00 net, VAT round(42.30) = ¥42.30 → total ¥747.30 (752.60 less
                    the goodwill's 5.30), "replaces GB-2026-000002"
"""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta
from decimal import Decimal as D
from pathlib import Path

import pypdfium2 as pdfium
import pytest

from billing.credit_notes import create_credit_note, void_invoice
from billing.errors import NotFound
from billing.invoicing import run_period
from billing.tenants import update_tenant
from billing_rules import load_rules
from reports.credit_note_document import credit_note_document
from reports.invoice_document import invoice_document
from reports.render import credit_note_to_dict, invoice_to_dict, render_credit_note, render_invoice
from tests.pdf_reading import english_words, pdf_text, save_pages
from tests.rules_copies import manual_review_rules
from tests.unit.test_balances import APRIL_2, db  # noqa: F401  (the fixture)
from tests.unit.test_current_usage import PERIOD, RULES
from tests.unit.test_documents_read import BUYER

ARTIFACTS = Path(__file__).parents[1] / "artifacts" / "documents"
APRIL_3, APRIL_4, APRIL_5 = (APRIL_2 + timedelta(days=n) for n in (1, 2, 3))  # 08:00 in Shanghai each
BETA = "GB-2026-000002"
GOODWILL_NOTE = "SLA missed on 10 March"


@pytest.fixture()
def issued(db):  # noqa: F811
    update_tenant(db, "beta", **BUYER)
    run_period(db, RULES, PERIOD, now=APRIL_2)
    return db


@pytest.fixture()
def goodwill(issued):
    note = create_credit_note(issued, RULES, BETA, "goodwill", {1: D("5.00")}, note=GOODWILL_NOTE, now=APRIL_3)
    return issued, note


@pytest.fixture()
def voided(goodwill):
    db, _ = goodwill
    invoice, note = void_invoice(db, RULES, BETA, "billed to the wrong contract", now=APRIL_4)
    return db, invoice, note


def _outside(doc, *more: str) -> list[str]:
    """Texts on a document that are not labels: ids, numbers, names, addresses, e-mail, models."""
    seller, buyer = doc.seller, doc.buyer
    lines = doc.invoice.lines if doc.invoice is not None else ()
    return [doc.invoice.tenant, doc.invoice.number, seller.contact, seller.tax_id, seller.bank_account or "",
            *(str(v) for v in vars(buyer).values()), *(line.gpu_model or "" for line in lines), *more]


def _title(data: bytes) -> str:
    """The PDF's title (its info dictionary), as a viewer's tab shows it."""
    document = pdfium.PdfDocument(data)
    try:
        return document.get_metadata_dict()["Title"]
    finally:
        document.close()


# -------------------------------------------------------------------------- credit notes


def test_a_credit_note_as_json(goodwill):
    db, note = goodwill
    d = json.loads(render_credit_note(credit_note_document(db, RULES, note.number), "json"))
    assert d == {
        "number": "CN-2026-000001", "invoice": BETA, "tenant": "beta", "period": PERIOD,
        "reason": "goodwill", "note": GOODWILL_NOTE,
        "issued_at": "2026-04-03T00:00:00Z", "issue_date": "2026-04-03",  # 08:00 in Shanghai
        "currency": "CNY",
        "lines": [{"line_no": 1, "invoice_line_no": 1, "kind": "rent", "description": "RTX4090 GPU rent, monthly plan",
                   "amount": "5.00"}],
        "subtotal": "5.00", "tax": "0.30", "total": "5.30",  # 5.00 × 6 % = 0.30
        "vat_rate": "0.06",
    }
    assert list(d) == ["number", "invoice", "tenant", "period", "reason", "note", "issued_at", "issue_date", "currency",
                       "lines", "subtotal", "tax", "total", "vat_rate"]


def test_a_void_credit_note_gives_the_credits_back_as_negative_lines(voided):
    db, _, note = voided
    d = credit_note_to_dict(credit_note_document(db, RULES, note.number))
    assert (d["number"], d["reason"], d["note"], d["issue_date"]) == ("CN-2026-000002", "void",
                                                                       "billed to the wrong contract", "2026-04-04")
    # 800.00 − 5.00 already credited; the discount and the trial credit back in full
    assert [(line["invoice_line_no"], line["kind"], line["amount"]) for line in d["lines"]] == [
        (1, "rent", "795.00"), (2, "discount", "-80.00"), (3, "credit", "-10.00")]
    # 795 − 80 − 10 = 705.00; VAT 42.60 − 0.30 = 42.30; 705.00 + 42.30 = 747.30
    assert (d["subtotal"], d["tax"], d["total"]) == ("705.00", "42.30", "747.30")


def test_a_credit_note_as_csv_has_its_lines_then_the_totals(voided):
    db, _, note = voided
    rows = list(csv.DictReader(io.StringIO(render_credit_note(credit_note_document(db, RULES, note.number),
                                                              "csv").decode("utf-8"))))
    assert list(rows[0]) == ["line_no", "invoice_line_no", "kind", "description", "amount"]
    assert [(r["line_no"], r["invoice_line_no"], r["kind"], r["amount"]) for r in rows] == [
        ("1", "1", "rent", "795.00"), ("2", "2", "discount", "-80.00"), ("3", "3", "credit", "-10.00"),
        ("", "", "subtotal", "705.00"), ("", "", "tax", "42.30"), ("", "", "total", "747.30")]
    assert [r["description"] for r in rows[3:]] == ["Subtotal", "VAT 6%", "Total"]
    assert sum(D(r["amount"]) for r in rows[:3]) == D(rows[3]["amount"])  # the lines add up to the subtotal


def test_an_english_credit_note_pdf(goodwill):
    db, note = goodwill
    doc = credit_note_document(db, RULES, note.number)
    data = render_credit_note(doc, "pdf", lang="en")
    save_pages(data, ARTIFACTS / "credit-note-beta-en")
    text = pdf_text(data)  # the buyer's name is Chinese: the PDF embeds the CJK font, amounts read ¥
    for expected in (
        "CREDIT NOTE", RULES.seller.legal_name, BUYER["legal_name"], "Customer ID: beta",
        "Credit note no.", "CN-2026-000001", "Issue date", "2026-04-03", "Credits invoice", BETA, "Billing period",
        PERIOD, "Reason", "Goodwill", f"Note: {GOODWILL_NOTE}",
        "RTX4090 GPU rent, monthly plan", "5.00",
        "Credited before VAT", "¥5.00", "VAT 6% reversed", "¥0.30", "Total credited (CNY)", "¥5.30",
        # issue 36: beta has no top-ups (postpaid), and is named, not its id; it said "added to the balance of beta"
        f"The amount is credited against what {BUYER['legal_name']} owes: ¥5.30 less to pay.",
    ):
        assert expected in text, expected
    assert "大写" not in text  # capitals on Chinese documents only
    assert _title(data) == "Credit note CN-2026-000001"


def test_a_chinese_credit_note_pdf_is_all_chinese_and_says_its_total_in_capitals(voided):
    db, _, note = voided
    doc = credit_note_document(db, RULES, note.number)
    data = render_credit_note(doc, "pdf", lang="zh-CN")
    save_pages(data, ARTIFACTS / "credit-note-beta-void-zh-CN")
    text = pdf_text(data)
    for expected in (
        "贷项通知单", RULES.seller.legal_name_zh, "客户", BUYER["legal_name"], "客户编号：beta",
        "通知单编号", "CN-2026-000002", "开具日期", "2026-04-04", "原账单编号", BETA, "账期", "原因", "作废",
        "RTX4090 GPU 租金（包月）", "795.00", "合同折扣 10%：RTX4090 GPU 租金（包月）", "-80.00", "新用户试用额度", "-10.00",
        "冲减金额（不含税）", "¥705.00", "冲减增值税 6%", "¥42.30", "冲减价税合计 (CNY)", "¥747.30",
        "大写：人民币柒佰肆拾柒元叁角",  # 747.30: 柒佰肆拾柒元 叁角, nothing after 角
        f"金额从{BUYER['legal_name']}的应付款中扣减：应付金额减少 ¥747.30。",  # postpaid (issue 36)
    ):
        assert expected in text, expected
    assert english_words(text, _outside(doc, note.number, note.note)) == set()
    assert "发票" not in text  # 贷项通知单: not a red-letter fapiao


def test_a_prepaid_customer_s_credit_returns_to_its_balance(goodwill):
    from billing.balances import top_up

    db, note = goodwill
    top_up(db, "beta", D("100.00"), "pay-beta-1")
    doc = credit_note_document(db, RULES, note.number)
    en, zh = (pdf_text(render_credit_note(doc, "pdf", lang=lang)) for lang in ("en", "zh-CN"))
    assert f"The amount returns to the prepaid balance of {BUYER['legal_name']}: ¥5.30 is added to it." in en
    assert f"金额退回预付余额：{BUYER['legal_name']}的预付余额增加 ¥5.30。" in zh
    assert "owes" not in en and "应付" not in zh


@pytest.mark.parametrize("reason, en, zh", [
    ("price_error", "Price error", "价格错误"), ("usage_error", "Usage error", "用量错误"),
    ("duplicate", "Duplicate invoice", "重复开具"), ("goodwill", "Goodwill", "商誉补偿"),
    ("void", "Invoice voided", "作废"), ("rerate", "Re-rating", "重新计价"),
])
def test_every_reason_is_said_in_both_languages(goodwill, reason, en, zh):
    db, note = goodwill
    doc = credit_note_document(db, RULES, note.number)
    doc = type(doc)(**{**vars(doc), "credit_note": type(note)(**{**vars(note), "reason": reason, "note": ""})})
    assert f"Reason {en}" in pdf_text(render_credit_note(doc, "pdf", lang="en"))
    assert f"原因 {zh}" in pdf_text(render_credit_note(doc, "pdf", lang="zh-CN"))


def test_a_credit_note_of_another_tenant_is_not_found(goodwill):
    db, note = goodwill
    assert credit_note_document(db, RULES, note.number, tenant="beta").credit_note.number == note.number
    with pytest.raises(NotFound):
        credit_note_document(db, RULES, note.number, tenant="acme")
    with pytest.raises(NotFound):
        credit_note_document(db, RULES, "CN-2026-999999")


def test_machine_formats_are_the_same_in_every_language_and_bad_input_is_refused(goodwill):
    db, note = goodwill
    doc = credit_note_document(db, RULES, note.number)
    for fmt in ("json", "csv"):
        assert render_credit_note(doc, fmt, lang="zh-CN") == render_credit_note(doc, fmt)
    assert render_credit_note(doc, "pdf", lang="zh-CN") == render_credit_note(doc, "pdf", lang="zh-CN")  # deterministic
    with pytest.raises(ValueError, match="unknown format"):
        render_credit_note(doc, "parquet")
    with pytest.raises(ValueError, match="unknown language"):
        render_credit_note(doc, "json", lang="fr")


def test_a_bare_credit_note_renders_with_nothing_around_it(goodwill):
    _, note = goodwill
    assert credit_note_to_dict(note)["issue_date"] is None
    text = pdf_text(render_credit_note(note, "pdf", lang="zh-CN"))
    assert "GPU 租金" in text and "未配置收款方信息" in text  # the kind's word; no seller configured


# -------------------------------------------------------------------------- invoices


def test_a_voided_invoice_is_marked_void_and_names_its_replacement(voided):
    db, invoice, _ = voided
    assert invoice.status == "voided"
    before = invoice_document(db, RULES, "beta", number=BETA)
    assert "No replacement has been issued yet." in pdf_text(render_invoice(before, "pdf", lang="en"))
    assert invoice_to_dict(before)["replaced_by"] == ""

    run_period(db, RULES, PERIOD, now=APRIL_5)  # issues the replacement, GB-2026-000003
    doc = invoice_document(db, RULES, "beta", number=BETA)
    d = json.loads(render_invoice(doc, "json"))
    assert (d["number"], d["id"], d["status"], d["replaces"], d["replaced_by"]) == (
        BETA, BETA, "voided", "", "GB-2026-000003")
    assert d["credit_notes"] == ["CN-2026-000001", "CN-2026-000002"]
    assert d["amount_due"] is None and d["due_date"] is None  # nothing is asked of a voided invoice
    assert d["total"] == "752.60"  # its figures stay as they were issued

    en = render_invoice(doc, "pdf", lang="en")
    zh = render_invoice(doc, "pdf", lang="zh-CN")
    save_pages(en, ARTIFACTS / "invoice-beta-voided-en")
    save_pages(zh, ARTIFACTS / "invoice-beta-voided-zh-CN")
    en, zh = pdf_text(en), pdf_text(zh)
    for expected in ("VOID INVOICE", "VOID - this invoice was voided: it is not to be paid.",
                     "Replaced by invoice GB-2026-000003.", "Status voided",
                     "Credit notes on this invoice: CN-2026-000001, CN-2026-000002."):
        assert expected in en, expected
    assert "Amount due" not in en and "Credit left after this invoice" not in en
    for expected in ("账单（已作废）", "已作废 — 本账单已作废，无需付款。", "已由账单 GB-2026-000003 替代。", "状态 已作废",
                     "本账单的贷项通知单：CN-2026-000001、CN-2026-000002。"):
        assert expected in zh, expected
    assert english_words(zh, _outside(doc, "GB-2026-000003", "CN-2026-000001", "CN-2026-000002")) == set()


def test_the_replacement_says_which_invoice_it_replaces(voided):
    db, _, _ = voided
    run_period(db, RULES, PERIOD, now=APRIL_5)
    doc = invoice_document(db, RULES, "beta", PERIOD)  # the one that stands: the replacement
    d = invoice_to_dict(doc)
    assert (d["number"], d["id"], d["status"], d["replaces"], d["replaced_by"], d["credit_notes"]) == (
        "GB-2026-000003", "GB-2026-000003", "issued", BETA, "", [])
    assert (d["credit"], d["total"]) == ("-10.00", "747.30")  # the trial credit the void freed, spent again
    assert (d["concession"], d["net"], d["tax"]) == ("-5.00", "705.00", "42.30")  # the goodwill, carried
    assert [(ln["kind"], ln.get("credit_id"), ln["amount"]) for ln in d["lines"] if ln["kind"] == "concession"] == [
        ("concession", "CN-2026-000001", "-5.00")]
    rows = list(csv.DictReader(io.StringIO(render_invoice(doc, "csv").decode())))
    assert [(r["kind"], r["amount"]) for r in rows if r["kind"] in ("concession", "concessions", "net")] == [
        ("concession", "-5.00"), ("concessions", "-5.00"), ("net", "705.00")]
    en, zh = (pdf_text(render_invoice(doc, "pdf", lang=lang)) for lang in ("en", "zh-CN"))
    save_pages(render_invoice(doc, "pdf", lang="zh-CN"), ARTIFACTS / "replacement-with-concession.zh-CN")
    assert "Replaces invoice GB-2026-000002, which was voided." in en and "Status issued" in en
    assert "INVOICE" in en and "VOID" not in en and "DRAFT" not in en
    assert "Goodwill credit CN-2026-000001" in en  # the concession, named by its note, among the totals
    assert "替代账单 GB-2026-000002（已作废）。" in zh and "状态 已开具" in zh
    assert "商誉补偿（贷项通知单 CN-2026-000001）" in zh
    assert english_words(zh, _outside(doc, BETA, "CN-2026-000001")) == set()


@pytest.fixture()
def manual_rules(tmp_path):
    return load_rules(manual_review_rules(tmp_path / "rules"))


def test_a_draft_is_marked_draft_and_shows_its_draft_id(db, manual_rules):  # noqa: F811
    update_tenant(db, "beta", **BUYER)
    report = run_period(db, manual_rules, PERIOD, now=APRIL_2)
    assert report.created == [] and len(report.drafted) == 2  # review = "manual": drafts only
    doc = invoice_document(db, manual_rules, "beta", PERIOD)
    draft_id = doc.invoice.id
    assert draft_id.startswith("DRAFT-")
    d = json.loads(render_invoice(doc, "json"))
    assert (d["number"], d["id"], d["status"], d["replaces"], d["credit_notes"]) == ("", draft_id, "draft", "", [])
    assert d["amount_due"] is None and d["due_date"] is None and d["prepaid"] is None  # nothing is asked yet
    assert d["total"] == "752.60"  # what it would issue today

    en = render_invoice(doc, "pdf", lang="en")
    zh = render_invoice(doc, "pdf", lang="zh-CN")
    save_pages(en, ARTIFACTS / "invoice-beta-draft-en")
    save_pages(zh, ARTIFACTS / "invoice-beta-draft-zh-CN")
    assert _title(en) == f"Invoice {draft_id} (draft)" and _title(zh) == f"账单 {draft_id}（草稿）"
    en, zh = pdf_text(en), pdf_text(zh)
    for expected in ("DRAFT INVOICE", "DRAFT - for review, not issued",
                     "It has no invoice number yet and nothing is due; its figures may still change before it is issued.",
                     f"Invoice number {draft_id} (no number yet)", "Invoice date not issued", "Drafted 2026-04-02",
                     "Status draft", f"invoice {draft_id} (draft) - beta", "Total (CNY)", "¥752.60"):
        assert expected in en, expected
    assert "Amount due" not in en and "Due date" not in en and "Credit left" not in en
    for expected in ("账单（草稿）", "草稿 — 待审核，尚未开具", "尚无账单编号，无需付款；开具前金额仍可能变动。",
                     f"账单编号 {draft_id}（尚未编号）",
                     "账单日期 未开具", "状态 草稿", "价税合计 (CNY)", "¥752.60", "大写：人民币柒佰伍拾贰元陆角"):
        assert expected in zh, expected
    assert "应付金额" not in zh
    assert english_words(zh, _outside(doc, draft_id)) == set()
