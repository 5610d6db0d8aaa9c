"""The languages documents are written in, and every label a PDF prints, per language.

    LANGS = ("en", "zh-CN")
    check_lang(lang) -> str        the language, or ValueError("unknown language ...")
    label(lang, key, **values)     the label `key` in `lang`, with ``{name}`` fields filled in

What a language changes, and what it does not:

- **PDF** (usage report, invoice): every heading, label, note and the chart's caption; the
  dates and figures keep one notation in both (``2026-03-05``, ``1,234.56``), amounts keep
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
tax system, which this document is not.
"""

from __future__ import annotations

__all__ = ["LANGS", "check_lang", "label"]

LANGS = ("en", "zh-CN")

_LABELS: dict[str, dict[str, str]] = {
    "en": {
        # usage report
        "usage.title": "GPU usage report - {tenant} - {period}",
        "usage.footer": "gpubill GPU Cloud - usage report for {tenant}, {period} - generated {generated}",
        "usage.subtitle": "Generated {generated}. Amounts in CNY, excluding VAT; kWh include PUE.",
        "usage.gpu_hours": "GPU-hours",
        "usage.kwh": "Energy billed (kWh)",
        "usage.rent": "Rent (CNY)",
        "usage.electricity": "Electricity (CNY)",
        "usage.amount": "Total excl. VAT (CNY)",
        "usage.counts": "{gpus} GPU(s), {rows} row(s). VAT is added on the invoice.",
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
        "col.total": "Total",
        "page": "Page {page} / {pages}",
        # invoice
        "inv.doc_title": "Invoice {number}",
        "inv.draft": "(draft)",
        "inv.footer": "{seller} - invoice {number} - {tenant} - {period}",
        "inv.heading": "INVOICE",
        "inv.tagline": "GPU compute rental and metered electricity",
        "inv.bill_to": "BILL TO",
        "inv.number": "Invoice number",
        "inv.not_numbered": "(not numbered)",
        "inv.period": "Billing period",
        "inv.issued": "Issued",
        "inv.not_issued": "not issued",
        "inv.status": "Status",
        "inv.currency": "Currency",
        "inv.description": "Description",
        "inv.quantity": "Quantity",
        "inv.unit": "Unit",
        "inv.unit_price": "Unit price",
        "inv.amount": "Amount",
        "inv.subtotal": "Subtotal",
        "inv.net": "Net",
        "inv.vat": "VAT {rate}%",
        "inv.total": "Total ({currency})",
        "inv.total_value": "{amount}",
        "inv.notes": ("Amounts in {currency}. Quantities: GPU-hours for rent, kWh (including the site's PUE) "
                      "for electricity. Line amounts are exact sums rounded half up to the fen; {vat} of net."),
        "kind.rent": "GPU rent",
        "kind.electricity": "Electricity",
        "kind.credit": "Credit",
        "kind.discount": "Discount",
        "kind.adjustment": "Adjustment",
        "detail.plan": "plan {value}",
        "detail.site": "site {value}",
        "detail.band": "band {value}",
        "detail.pue": "PUE {value}",
        "detail.ref_period": "for period {value}",
        "status.finalized": "finalized",
    },
    "zh-CN": {
        "usage.title": "GPU 用量报告 - {tenant} - {period}",
        "usage.footer": "gpubill GPU 云 - {tenant} {period} 用量报告 - 生成于 {generated}",
        "usage.subtitle": "生成于 {generated}。金额单位为人民币 (CNY)，不含增值税；电量 (kWh) 已计入 PUE。",
        "usage.gpu_hours": "GPU 时",
        "usage.kwh": "计费电量 (kWh)",
        "usage.rent": "租金 (CNY)",
        "usage.electricity": "电费 (CNY)",
        "usage.amount": "不含税合计 (CNY)",
        "usage.counts": "{gpus} 张 GPU，{rows} 行。增值税在账单中计收。",
        "usage.chart_day": "每日 GPU 时",
        "usage.chart_hour": "每日 GPU 时（由小时明细汇总）",
        "usage.chart_axis": "GPU 时",
        "usage.no_usage": "本期无用量",
        "usage.detail_day": "按日、实例和 GPU 的明细",
        "usage.detail_hour": "按小时 ({tz})、实例和 GPU 的明细",
        "col.day": "日期",
        "col.hour": "小时",
        "col.instance": "实例",
        "col.gpu": "GPU",
        "col.model": "型号",
        "col.gpu_hours": "GPU 时",
        "col.util": "利用率",
        "col.kwh": "电量 kWh",
        "col.rent": "租金",
        "col.electricity": "电费",
        "col.total": "合计",
        "page": "第 {page} / {pages} 页",
        "inv.doc_title": "账单 {number}",
        "inv.draft": "（草稿）",
        "inv.footer": "{seller} - 账单 {number} - {tenant} - {period}",
        "inv.heading": "账单",
        "inv.tagline": "GPU 算力租用及计量电费",
        "inv.bill_to": "客户",
        "inv.number": "账单编号",
        "inv.not_numbered": "（未编号）",
        "inv.period": "账期",
        "inv.issued": "开具时间",
        "inv.not_issued": "未开具",
        "inv.status": "状态",
        "inv.currency": "币种",
        "inv.description": "项目",
        "inv.quantity": "数量",
        "inv.unit": "单位",
        "inv.unit_price": "单价",
        "inv.amount": "金额",
        "inv.subtotal": "小计",
        "inv.net": "净额",
        "inv.vat": "增值税 {rate}%",
        "inv.total": "价税合计 ({currency})",
        "inv.total_value": "¥{amount}",
        "inv.notes": ("金额单位：{currency}（人民币）。数量：租金按 GPU 时计，电费按电量 (kWh，已计入机房 PUE) 计。"
                      "每行金额为精确累计后四舍五入到分；{vat} 按净额计算。"),
        "kind.rent": "GPU 租金",
        "kind.electricity": "电费",
        "kind.credit": "抵扣额度",
        "kind.discount": "折扣",
        "kind.adjustment": "调整",
        "detail.plan": "计费方式 {value}",
        "detail.site": "机房 {value}",
        "detail.band": "时段 {value}",
        "detail.pue": "PUE {value}",
        "detail.ref_period": "所属账期 {value}",
        "status.finalized": "已确认",
    },
}


def check_lang(lang: str) -> str:
    """`lang` when it is one of LANGS; otherwise ValueError naming the languages there are."""
    if lang not in LANGS:
        raise ValueError(f"unknown language {lang!r}; use one of: {', '.join(LANGS)}")
    return lang


def label(lang: str, key: str, **values: object) -> str:
    """The label `key` in `lang` with its ``{name}`` fields filled from `values`."""
    return _LABELS[check_lang(lang)][key].format(**values)
