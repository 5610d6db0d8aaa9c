"""Invoices and usage reports as a reader gets them (issue 23, items 2 and 3): each PDF is read
back with PDFium and must show every block a finance team needs, and a zh-CN one no English
word outside ids, names and units. Pages are kept under tests/artifacts/documents/ to look at.

The usage is tests/unit/test_balances.py's fixture, invoiced at APRIL_2 (08:00, 2 April in Shanghai):

    beta  RTX 4090 monthly at ¥1 per second (tests/e2e/rules: ¥2,678,400 per March), 10 % off,
          200 s: rent ¥200.00, discount −¥20.00 (the fixture's burn hour adds 600 s: 800 s in all)
          → rent ¥800.00, discount −¥80.00, trial −¥10.00, net ¥710.00, VAT ¥42.60, total ¥752.60
          postpaid: due 15 days after 2 April, on 2026-04-17
    acme  A800-80G hourly (¥3,600 per hour, tests/e2e/rules) and electricity; its ¥150.00
          onboarding credit and ¥7.70 of the trial cover ¥157.70 → total ¥0.00; prepaid (¥100 top-up):
          settled, balance after ¥100.00; trial credit left ¥2.30
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from billing.balances import top_up
from billing.invoicing import run_period
from billing.tenants import update_tenant
from reports.invoice_document import invoice_document
from reports.render import render_invoice, render_usage
from reports.usage_report import usage_report
from tests.pdf_reading import english_words, pdf_text, save_pages
from tests.unit.test_balances import APRIL_2, db  # noqa: F401  (the fixture)
from tests.unit.test_current_usage import PERIOD, RULES

ARTIFACTS = Path(__file__).parents[1] / "artifacts" / "documents"
BUYER = dict(legal_name="北京智算科技有限公司", tax_id="91350100M000100Y43", address="北京市海淀区中关村大街 1 号",
             email="finance@beta.example")


@pytest.fixture()
def invoiced(db):  # noqa: F811
    update_tenant(db, "beta", **BUYER)
    top_up(db, "acme", "100", "tx-acme-1", now=APRIL_2 - timedelta(hours=1))
    run_period(db, RULES, PERIOD, now=APRIL_2)
    return db


def _outside(doc) -> list[str]:
    """The texts on the document that are not labels: ids, names, addresses, e-mail, models."""
    seller, buyer, inv = doc.seller, doc.buyer, doc.invoice
    return [inv.tenant, inv.number, seller.contact, seller.tax_id, seller.bank_account or "",
            *(str(v) for v in vars(buyer).values()), *(line.gpu_model or "" for line in inv.lines)]


def test_an_english_invoice_shows_every_block(invoiced):
    doc = invoice_document(invoiced, RULES, "beta", PERIOD)
    data = render_invoice(doc, "pdf", lang="en")
    save_pages(data, ARTIFACTS / "invoice-beta-en")
    text = pdf_text(data)  # the buyer's name is Chinese: the PDF embeds the CJK font, amounts read ¥
    seller = RULES.seller
    for expected in (
        seller.brand, seller.legal_name, seller.tax_id, seller.bank_account,   # the seller block
        "BILL TO", BUYER["legal_name"], BUYER["tax_id"], BUYER["email"], "Customer ID: beta",  # the buyer block
        "Invoice date", "2026-04-02",                                         # in the billing zone
        "Service period", "2026-03-01 - 2026-03-31",
        "Payment terms", "15 days", "Due date", "2026-04-17",
        "¥2,678,400.00/month",                                             # the price as written
        "Subtotal", "¥800.00", "Contract discount 10% on RTX4090 GPU rent, monthly plan", "-¥80.00",
        "New-user trial credit", "-¥10.00", "Net", "¥710.00", "VAT 6%", "¥42.60", "Total (CNY)", "¥752.60",
        "Amount due: ¥752.60, by 2026-04-17.",
        "No credit is left after this invoice.",
    ):
        assert expected in text, expected
    assert "1.000000" not in text and "2026-04-02T" not in text  # no credit as 1 × −10, no raw RFC 3339 time


def test_a_chinese_invoice_is_all_chinese_and_says_its_total_in_capitals(invoiced):
    doc = invoice_document(invoiced, RULES, "beta", PERIOD)
    data = render_invoice(doc, "pdf", lang="zh-CN")
    save_pages(data, ARTIFACTS / "invoice-beta-zh-CN")
    text = pdf_text(data)
    seller = RULES.seller
    for expected in (
        seller.brand_zh, seller.legal_name_zh, seller.address_zh, seller.bank_zh, "纳税人识别号：" + seller.tax_id,
        "付款方", BUYER["legal_name"], BUYER["address"], "客户编号：beta",
        "账单日期", "2026-04-02", "服务期间", "2026-03-01 - 2026-03-31", "付款条件", "15 天内付款", "付款截止日", "2026-04-17",
        "RTX4090 GPU 租金（包月）", "卡时", "¥2,678,400.00/月",
        "小计", "¥800.00", "合同折扣 10%：RTX4090 GPU 租金（包月）", "-¥80.00", "新用户试用额度", "-¥10.00",
        "净额", "¥710.00", "增值税 6%", "¥42.60", "价税合计 (CNY)", "¥752.60",
        "大写：人民币柒佰伍拾贰元陆角",   # 752.60: 柒佰伍拾贰元 陆角, nothing after 角
        "应付金额：¥752.60，请于 2026-04-17 前付款。", "已开具",
    ):
        assert expected in text, expected
    assert english_words(text, _outside(doc)) == set()
    assert "发票" not in text  # 账单 on the PDF and the page: not an official VAT fapiao


def test_a_prepaid_invoice_says_it_was_settled_and_what_credit_is_left(invoiced):
    doc = invoice_document(invoiced, RULES, "acme", PERIOD)
    en, zh = (pdf_text(render_invoice(doc, "pdf", lang=lang)) for lang in ("en", "zh-CN"))
    save_pages(render_invoice(doc, "pdf", lang="zh-CN"), ARTIFACTS / "invoice-acme-zh-CN")
    assert "Settled from prepaid balance; balance after this invoice: CNY 100.00." in en
    assert "Credit left after this invoice: New-user trial credit CNY 2.30." in en
    assert "Payment terms" in en and "Prepaid balance" in en and "Due date" not in en
    assert "已从预付余额扣款；扣款后余额：¥100.00。" in zh
    assert "本账单后剩余抵扣额度：新用户试用额度 ¥2.30。" in zh
    assert "人民币零元整" in zh
    # the electricity line: the site's and band's Chinese names, the tariff as written
    assert "电费：贵州贵安（测试价格），单一电价" in zh and "/kWh" in zh
    assert english_words(zh, _outside(doc)) == set()


def test_a_chinese_usage_report_is_all_chinese(invoiced):
    report = usage_report(invoiced, RULES, "acme", PERIOD)
    data = render_usage(report, "pdf", lang="zh-CN")
    save_pages(data, ARTIFACTS / "usage-acme-zh-CN")
    text = pdf_text(data)
    assert "黔云算力" in text and "利用率 %" in text and "卡时" in text
    outside = [report.tenant, *(r.gpu_uuid for r in report.rows), *(r.instance for r in report.rows),
               *(r.gpu_model for r in report.rows)]
    assert english_words(text, outside) == set()


def test_an_issued_invoice_prints_the_seller_and_buyer_it_was_issued_with(invoiced, monkeypatch):
    """Issue 37: the invoice as issued carries its parties; a tenant update (or a new [seller]) after
    the issue changes the next invoice, not a copy of this one downloaded again."""
    from dataclasses import replace

    from billing.credit_notes import create_credit_note
    from reports.credit_note_document import credit_note_document

    before = invoice_document(invoiced, RULES, "beta", PERIOD)
    pdf = render_invoice(before, "pdf")
    note = create_credit_note(invoiced, RULES, before.invoice.number, "goodwill", None, note="sorry")
    note_pdf = render_invoice(invoice_document(invoiced, RULES, "beta", PERIOD), "pdf")  # now naming the note
    update_tenant(invoiced, "beta", legal_name="上海另一家公司", address="上海市浦东新区 2 号", email="ap@other.example")
    monkeypatch.setattr(type(RULES), "seller", property(lambda self: replace(before.seller, bank_account="9999 0000")))
    after = invoice_document(invoiced, RULES, "beta", PERIOD)
    assert (after.buyer, after.seller) == (before.buyer, before.seller)
    assert after.buyer.legal_name == BUYER["legal_name"] and after.seller.bank_account != "9999 0000"
    assert render_invoice(after, "pdf") == note_pdf != pdf  # the same document, the note named on it
    credit = credit_note_document(invoiced, RULES, note.number)
    assert (credit.buyer, credit.seller) == (before.buyer, before.seller)
