"""The JSON answers of the tenant API, declared (so /openapi.json describes every body) and
written in one number format:

- money (CNY): a string with two decimals, ``"0.00"``, ``"-7621.40"`` — never ``"0"``;
- quantities (GPU-hours, kWh): a string with six decimals, ``"0.000000"``;
- shares and hours: ``budget_used`` four decimals (0.8125 = 81.25 %), ``runway_hours`` two;
- times: RFC 3339 in UTC (``2026-03-10T08:30:05Z``), dates ``2026-04-17``.

`figures_dict` writes a dataclass of figures by these rules, by field name, so an amount that
reaches it with another exponent (``Decimal(0)``) is still written ``"0.00"``.
"""

from __future__ import annotations

from decimal import ROUND_DOWN, ROUND_HALF_UP, Decimal
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ANSWERS", "BalanceAnswer", "CreditNotesAnswer", "CurrentAnswer", "InvoicesAnswer", "MeAnswer", "PaymentsAnswer",
           "StatementAnswer", "figures_dict", "money_text"]

MONEY_FIELDS = frozenset({
    "rent", "electricity", "credits", "vat", "estimated_total", "top_ups", "invoiced", "estimated", "balance",
    "month_to_date", "budget", "burn_per_hour", "before_credits", "subtotal", "credit_used", "net", "tax", "total",
    "amount_due", "owed",
    # issue 38: payments, what is outstanding, the statement of account
    "payments", "refunded", "written_off", "paid", "credited", "outstanding", "past_due", "unapplied", "amount"})
QUANTITY_FIELDS = frozenset({"gpu_hours", "kwh"})
_PLACES = {"budget_used": 4, "runway_hours": 2}

Money = Annotated[str, Field(pattern=r"^-?[0-9]+\.[0-9]{2}$", examples=["1234.50"])]
Quantity = Annotated[str, Field(pattern=r"^[0-9]+\.[0-9]{6}$", examples=["24.000000"])]
Time = Annotated[str, Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z$", examples=["2026-03-10T08:30:05Z"])]
Day = Annotated[str, Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$", examples=["2026-04-17"])]
Period = Annotated[str, Field(pattern=r"^[0-9]{4}-[0-9]{2}$", examples=["2026-03"])]
InvoiceNumber = Annotated[str, Field(pattern=r"^GB-[0-9]{4}-[0-9]{6}$", examples=["GB-2026-000001"])]
CreditNoteNumber = Annotated[str, Field(pattern=r"^CN-[0-9]{4}-[0-9]{6}$", examples=["CN-2026-000001"])]
# an invoice named by another ("" when there is none: the API writes no null for it)
InvoiceNumberOrNone = Annotated[str, Field(pattern=r"^(GB-[0-9]{4}-[0-9]{6})?$", examples=["", "GB-2026-000004"])]


def money_text(value: Decimal) -> str:
    """Two decimals, half up (the invoice rule): ``Decimal(0)`` → ``"0.00"``."""
    return f"{Decimal(value).quantize(Decimal('0.01'), rounding=ROUND_HALF_UP):f}"


def _text(name: str, value: Decimal) -> str:
    if name in MONEY_FIELDS:
        return money_text(value)
    if name in QUANTITY_FIELDS:
        return f"{Decimal(value).quantize(Decimal('0.000001'), rounding=ROUND_HALF_UP):f}"
    if name in _PLACES:  # runway rounds down (it errs on the short side), the share half up
        rounding = ROUND_DOWN if name == "runway_hours" else ROUND_HALF_UP
        return f"{Decimal(value).quantize(Decimal(1).scaleb(-_PLACES[name]), rounding=rounding):f}"
    return f"{value:f}"


def figures_dict(figures: Any, names: Any = None) -> dict:
    """A dataclass (or mapping) of figures as JSON by the rules above: Decimals as strings in
    their field's format, times as UTC RFC 3339, other plain values as they are."""
    items = figures.items() if isinstance(figures, dict) else vars(figures).items()
    out = {}
    for name, value in items:
        if names is not None and name not in names:
            continue
        if isinstance(value, Decimal):
            out[name] = _text(name, value)
        elif hasattr(value, "isoformat"):
            out[name] = value.isoformat(timespec="seconds").replace("+00:00", "Z")
        elif isinstance(value, (str, int, bool, type(None))):
            out[name] = value
    return out


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MeAnswer(_Answer):
    tenant: str | None
    display_name: str
    key_id: str
    role: Literal["tenant", "operator"]
    label: str | None
    expires_at: Time | None
    created_at: Time | None = None


class StreamFigures(_Answer):
    """What the stream's spend table holds for the tenant (null: no worker priced it in the last minute)."""

    period: Period
    month_to_date: Money | None
    before_credits: Money | None
    budget: Money | None
    balance: Money | None
    runway_hours: Annotated[str, Field(pattern=r"^[0-9]+\.[0-9]{2}$")] | None
    as_of: Time


class CurrentAnswer(_Answer):
    tenant: str
    period: Period
    gpu_hours: Quantity
    kwh: Quantity
    rent: Money
    electricity: Money
    credits: Money
    vat: Money
    estimated_total: Money
    newest_data_at: Time | None
    invoiced: bool
    invoice_number: str | None
    estimate: bool
    currency: Literal["CNY"]
    stream: StreamFigures | None


class PeriodEstimate(_Answer):
    period: Period
    total: Money
    closed: bool


class BalanceAnswer(_Answer):
    tenant: str
    at: Time
    period: Period
    top_ups: Money
    invoiced: Money
    invoices: int
    estimated: Money
    balance: Money
    prepaid: bool  # the tenant has top-ups; a postpaid tenant's balance is what it is charged, negative
    owed: Money  # postpaid: what it is charged (invoices less credit notes and payments, and estimates); prepaid: "0.00"
    payments: Money  # payments received other than top-ups, not reversed (issue 38)
    refunded: Money  # credit paid back out of band
    written_off: Money  # invoices' amounts marked uncollectible, less what was recovered
    outstanding: Money = Field(description="what the issued invoices still ask, today: totals less payments, credit "
                                           "notes and write-offs allocated to them")
    past_due: Money = Field(description="the part of `outstanding` whose due date has passed")
    unapplied: Money = Field(description="credit held: payments and credit notes not yet allocated to an invoice, "
                                         "less refunds; spent on the next invoices")
    month_to_date: Money
    budget: Money | None
    budget_used: Annotated[str, Field(pattern=r"^[0-9]+\.[0-9]{4}$")] | None
    burn_per_hour: Money
    runway_hours: Annotated[str, Field(pattern=r"^[0-9]+\.[0-9]{2}$")] | None
    currency: Literal["CNY"]
    estimates: list[PeriodEstimate]
    stream: StreamFigures | None


class InvoiceSummary(_Answer):
    """An issued or voided invoice (drafts are never shown). A voided one asks for nothing
    (amount_due and outstanding "0.00", due_date null, settled true, overdue false) and names its
    replacement once issued. How it is paid is derived from the payments, credit notes and
    write-offs allocated to it, as of today in the billing time zone (issue 38): never stored."""

    number: InvoiceNumber
    period: Period
    status: Literal["issued", "voided"]
    issued_at: Time
    currency: Literal["CNY"]
    subtotal: Money
    credit_used: Money
    net: Money
    tax: Money
    total: Money
    issue_date: Day
    prepaid: bool = Field(description="the tenant has top-ups: its invoices are paid from its prepaid credit")
    amount_due: Money = Field(description="what is left to pay: the same as `outstanding`")
    due_date: Day | None = Field(description="issue date + the payment terms; null for a voided invoice")
    settled: bool = Field(description="nothing is outstanding (paid, credited or written off)")
    paid: Money = Field(description="payments allocated to it (a top-up spent on it too)")
    credited: Money = Field(description="credit notes allocated to it")
    written_off: Money = Field(description="marked uncollectible, less what later payments recovered")
    outstanding: Money = Field(description="total − paid − credited − written_off")
    payment_state: Literal["unpaid", "partially_paid", "paid"] = Field(
        description="`paid` once payments and credit notes cover the total; a write-off does not pay")
    overdue: bool = Field(description="the due date has passed and something is outstanding")
    replaces: InvoiceNumberOrNone = Field(description="the voided invoice this one replaces; \"\" for none")
    replaced_by: InvoiceNumberOrNone = Field(description="a voided invoice's replacement; \"\" while there is none")
    credit_notes: list[CreditNoteNumber] = Field(description="the credit notes on this invoice, oldest first")


class InvoicesAnswer(_Answer):
    invoices: list[InvoiceSummary]


class CreditNoteSummary(_Answer):
    """A credit note: what it credits of `invoice` before tax (`subtotal`), the VAT reversed
    (`tax`) and what returns to the tenant's prepaid balance (`total`)."""

    number: CreditNoteNumber
    invoice: InvoiceNumber
    period: Period
    reason: Literal["price_error", "usage_error", "duplicate", "goodwill", "void", "rerate"]
    issued_at: Time
    issue_date: Day
    currency: Literal["CNY"]
    subtotal: Money
    tax: Money
    total: Money


class CreditNotesAnswer(_Answer):
    credit_notes: list[CreditNoteSummary]


class PaymentAllocation(_Answer):
    invoice: InvoiceNumber
    amount: Money


class PaymentSummary(_Answer):
    """A payment received from the tenant (a top-up is one too): what of it went to which invoice,
    what is held as credit (`unapplied`), and when it was reversed (bounced, mistaken; null: it stands)."""

    ref: str
    amount: Money
    currency: Literal["CNY"]
    method: Literal["bank", "alipay", "wechat", "card", "other"]
    received_on: Day
    allocations: list[PaymentAllocation] = Field(description="by invoice, net of any reversal")
    unapplied: Money
    reversed_on: Day | None


class PaymentsAnswer(_Answer):
    payments: list[PaymentSummary]


class StatementLine(_Answer):
    """One movement of the account: `amount` adds to what the tenant owes (an invoice, a refund paid
    out, a payment reversed) or, negative, takes from it (a payment, a credit note, a write-off)."""

    date: Day
    kind: Literal["invoice", "credit_note", "payment", "payment_reversed", "refund", "write_off",
                  "write_off_recovered"]
    document: str = Field(description="the invoice or credit note number, the payment or refund ref")
    description: str
    amount: Money
    balance: Money = Field(description="the running balance after this line")


class StatementAging(_Answer):
    """The closing balance as of `to` by days past due: outstanding − unapplied = closing_balance."""

    current: Money
    d1_30: Money
    d31_60: Money
    d61_90: Money
    d90_plus: Money
    outstanding: Money
    unapplied: Money


class StatementAnswer(_Answer):
    """对账单, the statement of account from `from` to `to` (both included, billing time zone), as `gpubill
    statement --format json` writes it (reports/render/statement.py): what the tenant owed before
    (`opening_balance`; negative: credit it held), each movement with the running balance, the charges
    (the positive amounts) and credits (the negative ones), what it owes after (`closing_balance`), the
    aging as of `to`, and the seller and buyer the PDF prints."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    tenant: str
    from_: Day = Field(alias="from")
    to: Day
    currency: Literal["CNY"]
    opening_balance: Money
    entries: list[StatementLine]
    charges: Money
    credits: Money
    closing_balance: Money
    aging: StatementAging | None
    seller: dict[str, str | None] | None
    buyer: dict[str, str | None] | None


# path → the model of its 200 JSON answer (tests/unit/test_api_answers.py holds every answer to it)
ANSWERS: dict[str, type[_Answer]] = {"/v1/me": MeAnswer, "/v1/usage/current": CurrentAnswer,
                                    "/v1/balance": BalanceAnswer, "/v1/invoices": InvoicesAnswer,
                                    "/v1/credit-notes": CreditNotesAnswer, "/v1/payments": PaymentsAnswer,
                                    "/v1/statement": StatementAnswer}
