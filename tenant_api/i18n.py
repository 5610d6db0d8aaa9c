"""The web page's words in English and Simplified Chinese, and how a request's language is chosen.

Only the page is translated here; documents (PDF labels) are translated by
``reports.render`` and get the page's language passed to them, so a download reads like
the page it came from.

The language of a request, first that applies:

1. ``?lang=`` on the page (the switcher's links), then remembered in a cookie;
2. the ``gpubill_lang`` cookie;
3. ``Accept-Language`` (q-values honoured): any ``zh`` tag (zh, zh-CN, zh-Hans, zh-SG, and
   zh-TW/zh-HK too: of our two languages, Chinese readers are better served by Chinese)
   → ``zh-CN``, any ``en`` → ``en``;
4. English.

Amounts are written the same way in both languages, ``¥1,234.56``: two decimals, rounded
half up by ``reports.render.format`` (the invoice rule), thousands grouped.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal

from reports.render.format import grouped, round_half_up

__all__ = ["DEFAULT_LANG", "LANGS", "LANG_NAMES", "Words", "from_accept_language", "moment", "money", "number", "pick_lang",
           "words"]

LANGS = ("en", "zh-CN")
DEFAULT_LANG = "en"
LANG_NAMES = {"en": "English", "zh-CN": "简体中文"}

_EN: dict[str, str] = {
    "product": "GPU Billing",
    "portal": "Customer portal",
    "skip": "Skip to content",
    "language": "Language",
    # sign-in
    "sign_in_title": "Sign in with your API key",
    "sign_in_lead": "See this month's usage and spend, download usage reports, invoices and credit notes.",
    "key_label": "API key",
    "key_placeholder": "gpb_…",
    "key_hint": "The key your provider gave you; it starts with gpb_. It stays on the server for this session "
                "and is never stored in your browser.",
    "show_key": "Show",
    "hide_key": "Hide",
    "sign_in": "Sign in",
    "sign_out": "Sign out",
    "refused": "This key was not accepted: it is unknown, revoked or expired. Ask your provider for a new one.",
    "too_many": "Too many attempts from this address. Try again in {seconds} seconds.",
    "sessions_full": "This server has as many people signed in as it keeps. Try again in a few minutes.",
    "ended": "Your session has ended (the key was revoked or expired, or you were idle too long). "
             "Please sign in again.",
    "form_expired": "This form has expired or did not come from this page. Please try again.",
    "signed_out": "You have signed out.",
    "empty_key": "Enter your API key.",
    # header
    "tenant": "Tenant",
    "key": "Key",
    "expires": "expires {date}",
    "no_expiry": "does not expire",
    # operator
    "operator_title": "Operator key",
    "operator_lead": "This key may read any tenant. Enter the tenant id to view.",
    "operator_choose": "View tenant",
    "operator_viewing": "Viewing tenant",
    "operator_none": "Choose a tenant to see its usage and invoices.",
    "tenant_id": "Tenant id",
    # summary
    "summary_title": "This month so far",
    "period": "Billing period",
    "estimate": "Estimate — not yet invoiced",
    "invoiced": "Invoiced as {number}",
    "gpu_hours": "GPU-hours",
    "kwh": "Energy",
    "kwh_unit": "kWh",
    "rent": "GPU rent",
    "electricity": "Electricity",
    "credits": "Credits applied",
    "vat": "VAT",
    "estimated_total": "Estimated total incl. VAT",
    "total": "Total incl. VAT",
    "newest_data": "Includes data up to {time}",
    "no_data_yet": "No usage recorded yet this period.",
    # chart
    "chart_title": "Daily GPU-hours and spend",
    "chart_period": "Month",
    "chart_show": "Show",
    "chart_hours": "GPU-hours",
    "chart_spend": "Spend (¥, before credits and VAT)",
    "chart_empty": "No usage in {period}.",
    "chart_desc": "Bars: GPU-hours per day. Line: spend per day in yuan.",
    "day": "Day",
    # invoices
    "invoices_title": "Invoices",
    "number": "Number",
    "issued": "Issued",
    "amount": "Total",
    "files": "Files",
    "no_invoices": "No invoices yet. The first one is issued after your first billing period closes.",
    "due": "To pay",
    "due_by": "{amount} by {date}",
    "settled_prepaid": "Settled from prepaid balance",
    "nothing_due": "Nothing due",
    "status": "Status",
    "status_issued": "Issued",
    "status_voided": "Voided",
    "replaced_by": "replaced by {number}",
    "replaces": "replaces {number}",
    "credited_by": "credit notes: {numbers}",
    "voided_nothing_due": "Nothing due: voided",
    # how each invoice is paid (issue 38)
    "col_paid": "Paid",
    "col_outstanding": "Outstanding",
    "state_unpaid": "Unpaid",
    "state_partially_paid": "Partially paid",
    "state_paid": "Paid",
    "overdue": "Overdue",
    "written_off_remark": "written off {amount}",
    # payments
    "payments_title": "Payments",
    "payments_lead": "Payments received from you and the invoices each was applied to. What is not applied yet "
                     "is held as credit for your next invoices.",
    "no_payments": "No payments recorded yet.",
    "ref": "Reference",
    "received": "Received",
    "method": "Method",
    "applied_to": "Applied to",
    "held_as_credit": "Held as credit",
    "method_bank": "Bank transfer",
    "method_alipay": "Alipay",
    "method_wechat": "WeChat Pay",
    "method_card": "Card",
    "method_other": "Other",
    "reversed_on": "Reversed {date}",
    # statement of account
    "statement_title": "Statement of account",
    "statement_lead": "Everything invoiced, credited, paid, refunded and written off between two dates, with the "
                      "running balance: a positive balance is what you owe, a negative one credit you hold.",
    "statement_from": "From",
    "statement_to": "To",
    "statement_show": "Show",
    "statement_this_month": "This month",
    "statement_range": "{start} to {end}",
    "opening": "Opening balance",
    "closing": "Closing balance",
    "entry_date": "Date",
    "entry_what": "Entry",
    "entry_amount": "Amount",
    "entry_balance": "Balance",
    "entry_invoice": "Invoice {document}",
    "entry_credit_note": "Credit note {document}",
    "entry_payment": "Payment {document}",
    "entry_payment_reversed": "Payment {document} reversed",
    "entry_refund": "Refund {document}",
    "entry_write_off": "{document} written off",
    "entry_write_off_recovered": "Write-off of {document} recovered",
    "no_entries": "Nothing between {start} and {end}.",
    "statement_bad_range": "Choose two dates, the first on or before the second.",
    # credit notes
    "credit_notes_title": "Credit notes",
    "credit_notes_lead": "A credit note corrects an issued invoice; what it credits, with VAT, returns to your "
                         "prepaid balance.",
    "credit_notes_lead_postpaid": "A credit note corrects an issued invoice; what it credits, with VAT, comes off "
                                  "what you owe.",
    "no_credit_notes": "No credit notes.",
    "invoice": "Invoice",
    "reason": "Reason",
    "credited": "Credited incl. VAT",
    "reason_price_error": "Price error",
    "reason_usage_error": "Usage error",
    "reason_duplicate": "Duplicate charge",
    "reason_goodwill": "Goodwill",
    "reason_void": "Invoice voided",
    "reason_rerate": "Re-rated",
    # money left
    "money_title": "Balance and credits",
    "balance": "Prepaid balance",
    "owed": "Owed (postpaid)",
    "owed_note": "outstanding on invoices {outstanding} + not invoiced yet {estimated}",
    "owed_note_credit": "outstanding on invoices {outstanding} − credit held {unapplied} + not invoiced yet {estimated}",
    "outstanding_total": "Outstanding on invoices",
    "past_due_part": "of which overdue {amount}",
    "credit_held": "Credit held",
    "runway_postpaid": "postpaid: invoiced each month",
    "runway": "Runway",
    "runway_hours": "{hours} h at the last hour's spend",
    "no_runway": "no spend in the last hour",
    "credits_left": "Credits left",
    "no_credits_left": "No credit left",
    "credit_word": "Credit",
    # usage downloads
    "usage_title": "Usage reports",
    "usage_lead": "Every card-hour of a billing period, in the format your tools read. Reports use this page's "
                  "language.",
    "granularity": "Rows",
    "by_day": "One per day",
    "by_hour": "One per hour",
    "format": "Format",
    "download": "Download",
    # errors and footer
    "error_title": "Something went wrong",
    "not_found": "Not found: it does not exist, or it is not yours.",
    "unavailable": "The data cannot be read just now. Please try again in a minute.",
    "back": "Back to the portal",
    "footer": "Amounts in CNY (¥). This month's figures are estimates until the invoice is issued.",
    "api_hint": "Automate it: the same data is available from the HTTP API with the same key.",
}

_ZH: dict[str, str] = {
    "product": "GPU 计费",
    "portal": "客户中心",
    "skip": "跳到正文",
    "language": "语言",
    "sign_in_title": "使用 API 密钥登录",
    "sign_in_lead": "查看本月用量与费用，下载用量报告、账单和贷项通知单。",
    "key_label": "API 密钥",
    "key_placeholder": "gpb_…",
    "key_hint": "服务商提供给您的密钥，以 gpb_ 开头。它只在本次会话中保存在服务器上，不会存入浏览器。",
    "show_key": "显示",
    "hide_key": "隐藏",
    "sign_in": "登录",
    "sign_out": "退出登录",
    "refused": "此密钥未被接受：密钥不存在、已吊销或已过期。请向服务商申请新的密钥。",
    "too_many": "此地址尝试次数过多，请在 {seconds} 秒后重试。",
    "sessions_full": "本服务器的登录会话已满，请几分钟后重试。",
    "ended": "会话已结束（密钥已吊销或过期，或长时间未操作）。请重新登录。",
    "form_expired": "表单已过期或并非来自本页面，请重试。",
    "signed_out": "您已退出登录。",
    "empty_key": "请输入 API 密钥。",
    "tenant": "租户",
    "key": "密钥",
    "expires": "{date} 到期",
    "no_expiry": "长期有效",
    "operator_title": "运维密钥",
    "operator_lead": "此密钥可查看任意租户。请输入要查看的租户 ID。",
    "operator_choose": "查看租户",
    "operator_viewing": "正在查看租户",
    "operator_none": "请选择一个租户以查看其用量和账单。",
    "tenant_id": "租户 ID",
    "summary_title": "本月至今",
    "period": "账期",
    "estimate": "预估 — 尚未出账单",
    "invoiced": "已出账单：{number}",
    "gpu_hours": "卡时",
    "kwh": "用电量",
    "kwh_unit": "千瓦时",
    "rent": "GPU 租金",
    "electricity": "电费",
    "credits": "已抵扣额度",
    "vat": "增值税",
    "estimated_total": "预计总额（含税）",
    "total": "总额（含税）",
    "newest_data": "数据截至 {time}",
    "no_data_yet": "本账期暂无用量。",
    "chart_title": "每日卡时与费用",
    "chart_period": "月份",
    "chart_show": "查看",
    "chart_hours": "卡时",
    "chart_spend": "费用（元，未计抵扣和税）",
    "chart_empty": "{period} 无用量。",
    "chart_desc": "柱形：每日卡时。折线：每日费用（元）。",
    "day": "日期",
    "invoices_title": "账单",
    "number": "编号",
    "issued": "开具时间",
    "amount": "金额",
    "files": "文件",
    "no_invoices": "暂无账单。第一个账期结束后将开具首张账单。",
    "due": "应付",
    "due_by": "{amount}，{date} 前",
    "settled_prepaid": "已从预付余额扣款",
    "nothing_due": "无需付款",
    "status": "状态",
    "status_issued": "已开具",
    "status_voided": "已作废",
    "replaced_by": "已由 {number} 替代",
    "replaces": "替代 {number}",
    "credited_by": "贷项通知单：{numbers}",
    "voided_nothing_due": "已作废，无需付款",
    "col_paid": "已付",
    "col_outstanding": "未付",
    "state_unpaid": "未付款",
    "state_partially_paid": "部分付款",
    "state_paid": "已付清",
    "overdue": "已逾期",
    "written_off_remark": "已核销 {amount}",
    "payments_title": "付款记录",
    "payments_lead": "我们收到的您的付款，以及每笔付款冲抵的账单。尚未冲抵的部分作为余额，用于您之后的账单。",
    "no_payments": "暂无付款记录。",
    "ref": "参考号",
    "received": "到账日期",
    "method": "方式",
    "applied_to": "冲抵账单",
    "held_as_credit": "未冲抵余额",
    "method_bank": "银行转账",
    "method_alipay": "支付宝",
    "method_wechat": "微信支付",
    "method_card": "银行卡",
    "method_other": "其他",
    "reversed_on": "已于 {date} 冲正",
    "statement_title": "对账单",
    "statement_lead": "两个日期之间的全部开票、贷项、付款、退款与核销，以及累计余额：余额为正是您应付的金额，为负是您持有的余额。",
    "statement_from": "起始日期",
    "statement_to": "截止日期",
    "statement_show": "查看",
    "statement_this_month": "本月",
    "statement_range": "{start} 至 {end}",
    "opening": "期初余额",
    "closing": "期末余额",
    "entry_date": "日期",
    "entry_what": "摘要",
    "entry_amount": "金额",
    "entry_balance": "余额",
    "entry_invoice": "账单 {document}",
    "entry_credit_note": "贷项通知单 {document}",
    "entry_payment": "付款 {document}",
    "entry_payment_reversed": "付款 {document} 冲正",
    "entry_refund": "退款 {document}",
    "entry_write_off": "{document} 核销",
    "entry_write_off_recovered": "{document} 核销收回",
    "no_entries": "{start} 至 {end} 期间无记录。",
    "statement_bad_range": "请选择两个日期，起始日期不晚于截止日期。",
    "credit_notes_title": "贷项通知单",
    "credit_notes_lead": "贷项通知单用于更正已开具的账单，其退还金额（含税）返还至您的预付余额。",
    "credit_notes_lead_postpaid": "贷项通知单用于更正已开具的账单，其冲减金额（含税）从您的应付金额中扣减。",
    "no_credit_notes": "暂无贷项通知单。",
    "invoice": "账单",
    "reason": "原因",
    "credited": "退还金额（含税）",
    "reason_price_error": "价格错误",
    "reason_usage_error": "用量错误",
    "reason_duplicate": "重复计费",
    "reason_goodwill": "善意补偿",
    "reason_void": "账单作废",
    "reason_rerate": "重新计价",
    "money_title": "余额与抵扣额度",
    "balance": "预付余额",
    "owed": "应付（后付费）",
    "owed_note": "账单未付 {outstanding} + 尚未开账单 {estimated}",
    "owed_note_credit": "账单未付 {outstanding} − 持有余额 {unapplied} + 尚未开账单 {estimated}",
    "outstanding_total": "账单未付金额",
    "past_due_part": "其中逾期 {amount}",
    "credit_held": "持有余额",
    "runway_postpaid": "后付费：按月开具账单",
    "runway": "可用时长",
    "runway_hours": "按最近一小时的消费约 {hours} 小时",
    "no_runway": "最近一小时无消费",
    "credits_left": "剩余抵扣额度",
    "no_credits_left": "无剩余抵扣额度",
    "credit_word": "抵扣额度",
    "usage_title": "用量报表",
    "usage_lead": "一个账期内每张卡每小时的用量，提供多种格式。报表语言与本页面一致。",
    "granularity": "明细",
    "by_day": "按日",
    "by_hour": "按小时",
    "format": "格式",
    "download": "下载",
    "error_title": "出错了",
    "not_found": "未找到：该项不存在，或不属于您。",
    "unavailable": "暂时无法读取数据，请稍后重试。",
    "back": "返回客户中心",
    "footer": "金额单位为人民币（¥）。本月数据在出账单前均为预估。",
    "api_hint": "需要自动化？使用同一密钥即可通过 HTTP API 获取相同数据。",
}

_WORDS: dict[str, Mapping[str, str]] = {"en": _EN, "zh-CN": _ZH}


class Words:
    """The words of one language: ``t("too_many", seconds=3)``; every key exists in both."""

    def __init__(self, lang: str) -> None:
        if lang not in _WORDS:
            raise ValueError(f"unknown language {lang!r}; known: {', '.join(LANGS)}")
        self.lang = lang
        self._table = _WORDS[lang]

    def __call__(self, key: str, **values: object) -> str:
        text = self._table[key]
        return text.format(**values) if values else text


def words(lang: str) -> Words:
    return Words(lang)


def from_accept_language(header: str | None) -> str | None:
    """The best of :data:`LANGS` for an ``Accept-Language`` header, or None when none fits."""
    best: tuple[float, int, str] | None = None
    for position, part in enumerate((header or "")[:512].split(",")):
        tag, _, params = part.strip().partition(";")
        tag = tag.strip().lower()
        quality = 1.0
        for param in params.split(";"):
            name, _, value = param.strip().partition("=")
            if name.strip() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        if quality <= 0 or not tag:
            continue
        primary = tag.split("-")[0]
        lang = {"zh": "zh-CN", "en": "en"}.get(primary)
        if lang and (best is None or (quality, -position) > (best[0], best[1])):
            best = (quality, -position, lang)
    return best[2] if best else None


def pick_lang(query: str | None, cookie: str | None, accept_language: str | None) -> str:
    """The request's language (see the module docstring for the order)."""
    for choice in (query, cookie):
        if choice in LANGS:
            return choice
    return from_accept_language(accept_language) or DEFAULT_LANG


def money(value: Decimal | int) -> str:
    """``¥1,234.56``; a negative amount (a credit) as ``−¥10.00`` with a real minus sign."""
    rounded = round_half_up(value, 2)
    text = grouped(rounded.copy_abs(), 2)
    return f"\u2212¥{text}" if rounded < 0 else f"¥{text}"


def number(value: Decimal | int, places: int = 2) -> str:
    """A quantity for people: ``1,234.57`` (half up)."""
    return grouped(value, places)


def moment(value: datetime | None) -> str:
    """A time for people, in UTC and saying so: ``2026-03-10 08:00 UTC``."""
    if value is None:
        return ""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
