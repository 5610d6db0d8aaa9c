"""The languages documents are written in, and every label a PDF prints, per language.

    LANGS = ("en", "zh-CN")
    check_lang(lang) -> str        the language, or ValueError("unknown language ...")
    label(lang, key, **values)     the label `key` in `lang`, with ``{name}`` fields filled in

What a language changes, and what it does not:

- **PDF** (usage report, invoice, credit note, statement): every heading, label, note and the
  chart's caption; the dates and figures keep one notation in both (``2026-03-05``, ``1,234.56``), amounts keep
  two decimals and say their currency (``CNY`` in headings, ``¥`` before a Chinese total).
- **CSV, JSON, Parquet**: nothing. Their column names and keys (``gpu_hours``, ``rent``,
  ``kind``, ``subtotal`` …) are a machine contract that scripts and finance read, so they
  stay the same in every language, and so do the words in the invoice CSV's summary rows
  (``Subtotal``, ``VAT 6%``): the same period and format give the same bytes whatever the
  language. The language is still validated for every format, so a bad ``lang`` fails the
  same way everywhere.

Chinese labels are written for the reference operator's customers (Simplified Chinese, the
mainland's usual billing vocabulary: 账单, 租金, 电费, 增值税). The invoice is titled 账单
(a bill), not 发票: on the mainland 发票 means the official VAT fapiao issued through the
tax system, which this document is not. A credit note is likewise 贷项通知单, not 红字发票
(the fapiao system's red-letter invoice).
"""

from __future__ import annotations

__all__ = ["LANGS", "band_name", "check_lang", "label", "plan_name", "unit_name"]

LANGS = ("en", "zh-CN")

_LABELS: dict[str, dict[str, str]] = {
    "en": {
        # usage report
        "usage.title": "GPU usage report - {tenant} - {period}",
        "usage.footer": "{brand} - usage report for {tenant}, {period} - generated {generated}",
        "usage.subtitle": "Generated {generated}. Amounts in CNY, excluding VAT; kWh include PUE.",
        "usage.agrees": ("Totals equal the invoice's rent, discount and electricity lines before credits and VAT; "
                         "each row is rounded to the fen (GPU-hours and kWh to 0.000001) so that the rows add up "
                         "to them."),
        "usage.gpu_hours": "GPU-hours",
        "usage.kwh": "Energy billed (kWh)",
        "usage.rent": "Rent (CNY)",
        "usage.electricity": "Electricity (CNY)",
        "usage.amount": "Total excl. VAT (CNY)",
        "usage.counts": "{gpus} GPU(s), {rows} row(s). VAT is added on the invoice.",
        "usage.graded": ("IT energy before PUE: {measured} kWh measured by the cards' energy counters, "
                         "{estimated} kWh estimated from power readings."),
        "usage.chart_day": "GPU-hours per day",
        "usage.chart_hour": "GPU-hours per day (from hourly rows)",
        "usage.chart_axis": "GPU-hours",
        "usage.no_usage": "No usage in this period",
        "usage.detail_day": "Detail by day, instance and GPU",
        "usage.detail_hour": "Detail by hour ({tz}), instance and GPU",
        "col.day": "Day",
        "col.hour": "Hour",
        "col.instance": "Instance",
        "col.gpu": "GPU",
        "col.model": "Model",
        "col.gpu_hours": "GPU-hours",
        "col.util": "Util %",
        "col.kwh": "kWh",
        "col.rent": "Rent",
        "col.electricity": "Electricity",
        "col.measured": "Measured",
        "col.total": "Total",
        "page": "Page {page} / {pages}",
        # invoice
        "inv.doc_title": "Invoice {number}",
        "inv.draft": "(draft)",
        "inv.footer": "{seller} - invoice {number} - {tenant} - {period}",
        "inv.heading": "INVOICE",
        "inv.tagline": "GPU compute rental and metered electricity",
        "inv.seller": "FROM",
        "inv.no_seller": "Seller details not configured (billing.toml [seller])",
        "inv.bill_to": "BILL TO",
        "inv.number": "Invoice number",
        "inv.not_numbered": "(not numbered)",
        "inv.period": "Billing period",
        "inv.issue_date": "Invoice date",
        "inv.service_period": "Service period",
        "inv.terms": "Payment terms",
        "inv.terms_days": "{days} days",
        "inv.terms_prepaid": "Prepaid balance",
        "inv.due_date": "Due date",
        "inv.not_issued": "not issued",
        "inv.status": "Status",
        "inv.currency": "Currency",
        "inv.description": "Description",
        "inv.quantity": "Quantity",
        "inv.unit": "Unit",
        "inv.unit_price": "Unit price",
        "inv.amount": "Amount (CNY)",
        "inv.subtotal": "Subtotal",
        "inv.net": "Net",
        "inv.vat": "VAT {rate}%",
        "inv.total": "Total ({currency})",
        "inv.total_words": "{words}",
        "inv.notes": ("Amounts in {currency}. Quantities: GPU-hours for rent, kWh (including the site's PUE) "
                      "for electricity. Line amounts are exact sums rounded half up to the fen; {vat} of net."),
        "party.tax_id": "Tax ID: {value}",
        "party.no_tax_id": "Tax ID: not on file",
        "party.bank": "Bank: {bank}, account {account}",
        "party.contact": "Billing contact: {value}",
        "party.tenant": "Customer ID: {value}",
        "party.email": "E-mail: {value}",
        "line.rent": "{model} GPU rent, {plan}",
        "line.electricity": "Electricity at {site}, {band}",
        "line.discount": "Contract discount {pct}% on {what}",
        "line.adjustment": "Late usage for {period}: {what}",
        "line.concession": "Goodwill credit {note}",
        "pay.due": "Amount due: {amount}, by {date}.",
        "pay.to": "Please pay to {bank}, account {account}, quoting invoice {number}.",
        "pay.nothing_due": "Nothing is due on this invoice.",
        "pay.prepaid": "Settled from prepaid balance; balance after this invoice: {balance}.",
        "pay.shortfall": "The balance did not cover it: {amount} is due by {date}.",
        "pay.credit_left": "Credit left after this invoice: {credits}.",
        "pay.no_credit_left": "No credit is left after this invoice.",
        "kind.rent": "GPU rent",
        "kind.electricity": "Electricity",
        "kind.credit": "Credit",
        "kind.discount": "Discount",
        "kind.adjustment": "Adjustment",
        "kind.concession": "Goodwill credit",
        "detail.pue": "PUE {value}",
        "detail.ref_period": "for period {value}",
        "status.draft": "draft",
        "status.issued": "issued",
        "status.voided": "voided",
        # the invoice's lifecycle (issue 24): a draft under review, a voided invoice, a replacement
        "inv.heading_draft": "DRAFT INVOICE",
        "inv.heading_voided": "VOID INVOICE",
        "inv.draft_title": "{id} (draft)",
        "inv.draft_number": "{id} (no number yet)",
        "inv.drafted": "Drafted",
        "inv.draft_banner": "DRAFT - for review, not issued",
        "inv.draft_terms": ("It has no invoice number yet and nothing is due; its figures may still change "
                            "before it is issued."),
        "inv.void_banner": "VOID - this invoice was voided: it is not to be paid.",
        "inv.replaced_by": "Replaced by invoice {number}.",
        "inv.not_replaced": "No replacement has been issued yet.",
        "inv.replaces": "Replaces invoice {number}, which was voided.",
        "inv.credit_notes": "Credit notes on this invoice: {numbers}.",
        "list.sep": ", ",
        # credit notes
        "cn.doc_title": "Credit note {number}",
        "cn.footer": "{seller} - credit note {number} - invoice {invoice} - {tenant}",
        "cn.heading": "CREDIT NOTE",
        "cn.tagline": "Correction of an issued invoice",
        "cn.customer": "CUSTOMER",
        "cn.number": "Credit note no.",
        "cn.issue_date": "Issue date",
        "cn.invoice": "Credits invoice",
        "cn.reason": "Reason",
        "cn.note": "Note: {note}",
        "cn.line": "Invoice line",
        "cn.subtotal": "Credited before VAT",
        "cn.vat": "VAT {rate}% reversed",
        "cn.total": "Total credited ({currency})",
        "cn.returns_prepaid": "The amount returns to the prepaid balance of {customer}: {amount} is added to it.",
        "cn.returns_postpaid": "The amount is credited against what {customer} owes: {amount} less to pay.",
        "cn.returns": "{amount} is credited to {customer}.",
        "cn.notes": ("Amounts in {currency}. Line amounts are before VAT; a negative line takes back a negative "
                     "line of the invoice (a credit, a discount, an adjustment). VAT is reversed at the invoice's rate, {rate}%; credit notes never "
                     "credit more than the invoice."),
        "reason.price_error": "Price error",
        "reason.usage_error": "Usage error",
        "reason.duplicate": "Duplicate invoice",
        "reason.goodwill": "Goodwill",
        "reason.void": "Invoice voided",
        "reason.rerate": "Re-rating",
        # statements of account (issue 38)
        "st.doc_title": "Statement of account {tenant} {start} - {end}",
        "st.footer": "{seller} - statement of account - {tenant} - {start} to {end}",
        "st.heading": "STATEMENT",
        "st.tagline": "Statement of account: invoices, credit notes, payments",
        "st.customer_id": "Customer ID",
        "st.from": "From",
        "st.to": "To",
        "st.date": "Date",
        "st.document": "Document",
        "st.amount": "Amount (CNY)",
        "st.balance": "Balance (CNY)",
        "st.opening": "Opening balance",
        "st.closing": "Closing balance",
        "st.no_entries": "No invoice, credit note or payment in this period",
        "st.charges": "Invoiced, refunded, reversed",
        "st.credits": "Paid, credited, written off",
        "st.closing_total": "Closing balance ({currency})",
        "st.aging": "The balance on {date} by days past the due date:",
        "st.bucket.current": "Not yet due",
        "st.bucket.d1_30": "1-30 days",
        "st.bucket.d31_60": "31-60 days",
        "st.bucket.d61_90": "61-90 days",
        "st.bucket.d90_plus": "Over 90 days",
        "st.bucket.outstanding": "Outstanding",
        "st.bucket.unapplied": "Credit held",
        "st.notes": ("Amounts in {currency}, with VAT. A positive balance is what the customer owes, a negative one "
                     "credit it holds; invoices, refunds paid out and reversed payments add to it, payments, credit "
                     "notes and write-offs take from it. Dates are in the billing time zone; each day's entries are "
                     "listed invoices first. The closing balance is what is outstanding less the credit held."),
        "st.kind.invoice": "Invoice {document}",
        "st.kind.credit_note": "Credit note {document}",
        "st.kind.payment": "Payment {document}",
        "st.kind.payment_reversed": "Payment {document} reversed",
        "st.kind.refund": "Refund {document}",
        "st.kind.write_off": "{document} written off",
        "st.kind.write_off_recovered": "{document} write-off recovered",
    },
    "zh-CN": {
        "usage.title": "GPU 用量报告 - {tenant} - {period}",
        "usage.footer": "{brand} - {tenant} {period} 用量报告 - 生成于 {generated}",
        "usage.subtitle": "生成于 {generated}。金额单位为人民币 (CNY)，不含增值税；电量 (kWh) 已计入 PUE。",
        "usage.agrees": "合计与账单中抵扣和增值税之前的租金、折扣和电费各行一致；每行金额取整到分（卡时和电量取整到 0.000001），各行相加正好等于合计。",
        "usage.gpu_hours": "卡时",
        "usage.kwh": "计费电量 (kWh)",
        "usage.rent": "租金 (CNY)",
        "usage.electricity": "电费 (CNY)",
        "usage.amount": "不含税合计 (CNY)",
        "usage.counts": "{gpus} 张 GPU，{rows} 行。增值税在账单中计收。",
        "usage.graded": "设备电量（未计 PUE）：{measured} kWh 由 GPU 电能计数器计量，{estimated} kWh 按功率读数估算。",
        "usage.chart_day": "每日卡时",
        "usage.chart_hour": "每日卡时（由小时明细汇总）",
        "usage.chart_axis": "卡时",
        "usage.no_usage": "本期无用量",
        "usage.detail_day": "按日、实例和 GPU 的明细",
        "usage.detail_hour": "按小时 ({tz})、实例和 GPU 的明细",
        "col.day": "日期",
        "col.hour": "小时",
        "col.instance": "实例",
        "col.gpu": "GPU",
        "col.model": "型号",
        "col.gpu_hours": "卡时",
        "col.util": "利用率 %",
        "col.kwh": "电量 kWh",
        "col.rent": "租金",
        "col.electricity": "电费",
        "col.measured": "实测占比",
        "col.total": "合计",
        "page": "第 {page} / {pages} 页",
        "inv.doc_title": "账单 {number}",
        "inv.draft": "（草稿）",
        "inv.footer": "{seller} - 账单 {number} - {tenant} - {period}",
        "inv.heading": "账单",
        "inv.tagline": "GPU 算力租用及计量电费",
        "inv.seller": "收款方",
        "inv.no_seller": "未配置收款方信息（billing.toml [seller]）",
        "inv.bill_to": "付款方",
        "inv.number": "账单编号",
        "inv.not_numbered": "（未编号）",
        "inv.period": "账期",
        "inv.issue_date": "账单日期",
        "inv.service_period": "服务期间",
        "inv.terms": "付款条件",
        "inv.terms_days": "{days} 天内付款",
        "inv.terms_prepaid": "预付余额扣款",
        "inv.due_date": "付款截止日",
        "inv.not_issued": "未开具",
        "inv.status": "状态",
        "inv.currency": "币种",
        "inv.description": "项目",
        "inv.quantity": "数量",
        "inv.unit": "单位",
        "inv.unit_price": "单价",
        "inv.amount": "金额 (¥)",
        "inv.subtotal": "小计",
        "inv.net": "净额",
        "inv.vat": "增值税 {rate}%",
        "inv.total": "价税合计 ({currency})",
        "inv.total_words": "大写：{words}",
        "inv.notes": ("金额单位：{currency}（人民币）。数量：租金按卡时计，电费按电量 (kWh，已计入机房 PUE) 计。"
                      "每行金额为精确累计后四舍五入到分；{vat} 按净额计算。"),
        "kind.rent": "GPU 租金",
        "kind.electricity": "电费",
        "kind.credit": "抵扣额度",
        "kind.discount": "折扣",
        "kind.adjustment": "调整",
        "kind.concession": "商誉补偿",
        "detail.pue": "PUE {value}",
        "detail.ref_period": "所属账期 {value}",
        "status.draft": "草稿",
        "status.issued": "已开具",
        "status.voided": "已作废",
        "inv.heading_draft": "账单（草稿）",
        "inv.heading_voided": "账单（已作废）",
        "inv.draft_title": "{id}（草稿）",
        "inv.draft_number": "{id}（尚未编号）",
        "inv.drafted": "草稿生成日期",
        "inv.draft_banner": "草稿 — 待审核，尚未开具",
        "inv.draft_terms": "尚无账单编号，无需付款；开具前金额仍可能变动。",
        "inv.void_banner": "已作废 — 本账单已作废，无需付款。",
        "inv.replaced_by": "已由账单 {number} 替代。",
        "inv.not_replaced": "替代账单尚未开具。",
        "inv.replaces": "替代账单 {number}（已作废）。",
        "inv.credit_notes": "本账单的贷项通知单：{numbers}。",
        "list.sep": "、",
        "cn.doc_title": "贷项通知单 {number}",
        "cn.footer": "{seller} - 贷项通知单 {number} - 账单 {invoice} - {tenant}",
        "cn.heading": "贷项通知单",
        "cn.tagline": "已开具账单的更正",
        "cn.customer": "客户",
        "cn.number": "通知单编号",
        "cn.issue_date": "开具日期",
        "cn.invoice": "原账单编号",
        "cn.reason": "原因",
        "cn.note": "说明：{note}",
        "cn.line": "原账单行",
        "cn.subtotal": "冲减金额（不含税）",
        "cn.vat": "冲减增值税 {rate}%",
        "cn.total": "冲减价税合计 ({currency})",
        "cn.returns_prepaid": "金额退回预付余额：{customer}的预付余额增加 {amount}。",
        "cn.returns_postpaid": "金额从{customer}的应付款中扣减：应付金额减少 {amount}。",
        "cn.returns": "{customer}获得贷记 {amount}。",
        "cn.notes": ("金额单位：{currency}（人民币）。各行金额不含税；负数行冲回原账单的负数行（抵扣额度、折扣或调整）。"
                     "增值税按原账单税率 {rate}% 冲减；贷项通知单冲减的金额不超过原账单。"),
        "reason.price_error": "价格错误",
        "reason.usage_error": "用量错误",
        "reason.duplicate": "重复开具",
        "reason.goodwill": "商誉补偿",
        "reason.void": "作废",
        "reason.rerate": "重新计价",
        "party.tax_id": "纳税人识别号：{value}",
        "party.no_tax_id": "纳税人识别号：未登记",
        "party.bank": "开户行：{bank}，账号 {account}",
        "party.contact": "账务联系：{value}",
        "party.tenant": "客户编号：{value}",
        "party.email": "电子邮箱：{value}",
        "line.rent": "{model} GPU 租金（{plan}）",
        "line.electricity": "电费：{site}，{band}",
        "line.discount": "合同折扣 {pct}%：{what}",
        "line.adjustment": "补计 {period} 账期用量：{what}",
        "line.concession": "商誉补偿（贷项通知单 {note}）",
        "pay.due": "应付金额：{amount}，请于 {date} 前付款。",
        "pay.to": "收款账户：{bank}，账号 {account}，付款时请注明账单编号 {number}。",
        "pay.nothing_due": "本账单无需付款。",
        "pay.prepaid": "已从预付余额扣款；扣款后余额：{balance}。",
        "pay.shortfall": "余额不足：{amount} 请于 {date} 前付款。",
        "pay.credit_left": "本账单后剩余抵扣额度：{credits}。",
        "pay.no_credit_left": "本账单后无剩余抵扣额度。",
        "st.doc_title": "对账单 {tenant} {start} 至 {end}",
        "st.footer": "{seller} - 对账单 - {tenant} - {start} 至 {end}",
        "st.heading": "对账单",
        "st.tagline": "往来明细：账单、贷项通知单、收款",
        "st.customer_id": "客户编号",
        "st.from": "起始日期",
        "st.to": "截止日期",
        "st.date": "日期",
        "st.document": "单据编号",
        "st.amount": "金额 (¥)",
        "st.balance": "余额 (¥)",
        "st.opening": "期初余额",
        "st.closing": "期末余额",
        "st.no_entries": "本期无账单、贷项通知单或收款",
        "st.charges": "本期应收（账单、退款、收款冲回）",
        "st.credits": "本期减少（收款、贷项、核销）",
        "st.closing_total": "期末余额 ({currency})",
        "st.aging": "截至 {date} 的余额按逾期天数：",
        "st.bucket.current": "未到期",
        "st.bucket.d1_30": "逾期 1-30 天",
        "st.bucket.d31_60": "逾期 31-60 天",
        "st.bucket.d61_90": "逾期 61-90 天",
        "st.bucket.d90_plus": "逾期 90 天以上",
        "st.bucket.outstanding": "未结清合计",
        "st.bucket.unapplied": "预收未核销",
        "st.notes": ("金额单位：{currency}（人民币），含增值税。余额为正表示客户应付，为负表示客户预收未核销的款项；"
                     "账单、退款和收款冲回增加余额，收款、贷项通知单和坏账核销减少余额。日期按计费时区；同日各项以账单在前。"
                     "期末余额等于未结清金额减去预收未核销款项。"),
        "st.kind.invoice": "账单 {document}",
        "st.kind.credit_note": "贷项通知单 {document}",
        "st.kind.payment": "收款 {document}",
        "st.kind.payment_reversed": "收款冲回 {document}",
        "st.kind.refund": "退款 {document}",
        "st.kind.write_off": "坏账核销 {document}",
        "st.kind.write_off_recovered": "核销收回 {document}",
    },
}


# Words of the rules' vocabulary on documents. Plans and units are fixed; band names are the
# operator's own (billing_rules `name_zh` wins), these are the usual words for the usual ones.
_PLANS = {"en": {"monthly": "monthly plan", "hourly": "on demand (hourly)"},
          "zh-CN": {"monthly": "包月", "hourly": "按量计费"}}
_UNITS = {"en": {"GPU-hour": "GPU-hour", "kWh": "kWh", "month": "month"},
          "zh-CN": {"GPU-hour": "卡时", "kWh": "kWh", "month": "月"}}
_BANDS_ZH = {"flat": "单一电价", "peak": "峰时", "valley": "谷时", "shoulder": "平时", "mid": "平时",
             "normal": "平时", "sharp": "尖峰", "critical": "尖峰", "weekend": "周末", "holiday": "节假日"}


def plan_name(lang: str, plan: str) -> str:
    """A plan id ("monthly", "hourly") as a document in `lang` names it; an unknown one as it is."""
    return _PLANS[check_lang(lang)].get(plan, plan)


def unit_name(lang: str, unit: str) -> str:
    """A unit ("GPU-hour", "kWh", "month") in `lang`: 卡时, kWh, 月."""
    return _UNITS[check_lang(lang)].get(unit, unit)


def band_name(lang: str, band: str) -> str:
    """A tariff band's usual name in `lang` ("flat" → 单一电价, "peak" → 峰时); English keeps the id.
    Rule files name other bands with `name_zh` (billing_rules/files.py)."""
    if check_lang(lang) == "en":
        return f"{band} band"
    return _BANDS_ZH.get(band, band)


def check_lang(lang: str) -> str:
    """`lang` when it is one of LANGS; otherwise ValueError naming the languages there are."""
    if lang not in LANGS:
        raise ValueError(f"unknown language {lang!r}; use one of: {', '.join(LANGS)}")
    return lang


def label(lang: str, key: str, **values: object) -> str:
    """The label `key` in `lang` with its ``{name}`` fields filled from `values`."""
    return _LABELS[check_lang(lang)][key].format(**values)
