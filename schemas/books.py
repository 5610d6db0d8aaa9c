"""The books on the log (issue 37): every money and account fact, as an immutable, versioned event.

`gpu.books.v1` is the system of record for money: a fact exists once it is acknowledged on the
topic (acks=all); the ClickHouse tables that hold tenants, top-ups, budgets, invoices, credit
notes, the journal, billing runs, re-rating publications, API keys and rule sets are its
projection (billing/books_projection.py), written idempotently by log position, and
`gpubill rebuild` makes them again from the topic alone. docs/books.md lists the kinds.

One message is one `BooksEvent`:

    {"v": 1, "at": "...Z", "writer": "host:pid", "fact": {"kind": "invoice_issued", ...}}

`v` is the schema version of the whole envelope. A reader meets a version it does not know
(`v` > BOOKS_SCHEMA_VERSION: written by a newer gpubill) or a value it cannot read: it stops
at that position and says so (`UnreadableFact`) — money is never skipped nor guessed.

A fact carries the rows it makes, each as a model named after its table with its fields in
the table's column order (a unit test holds them against the migrated tables), plus what a
reader needs besides: the invoice as issued also carries its seller and buyer as they were.
Values are exact in JSON: Decimal as text ("12.30"), times as RFC 3339 UTC to the microsecond.

Pure: no Kafka, no ClickHouse, no clock.
"""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Annotated, ClassVar, Literal, Union

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

__all__ = [
    "AllocationRow", "ApiKeyFact", "ApiKeyRow", "CreditApplied", "DunningNoticeRow", "DunningNoticeSent",
    "InvoiceTermsRow", "InvoiceWrittenOff", "PaymentRecorded", "PaymentReversalRow", "PaymentReversed", "PaymentRow",
    "RefundRow", "WriteOffRow", "BOOKS_SCHEMA_VERSION", "BillingRunCompleted", "BillingRunRow", "BooksEvent",
    "BudgetRow", "BudgetSet", "CreditNoteIssued", "CreditNoteLineRow", "CreditNoteRow", "Fact", "InvoiceFact",
    "InvoiceHeaderRow", "InvoiceLineRow", "InvoicePartiesRow", "JournalRow", "ReratePublished", "RerateRunRow", "Row", "RuleSetLoaded",
    "RuleSetRow", "TenantFact", "TenantRow", "TopUpRecorded", "TopUpRow", "UnreadableFact", "decode_event",
    "encode_event",
]

BOOKS_SCHEMA_VERSION = 1
_FROZEN = ConfigDict(frozen=True, extra="forbid")


class UnreadableFact(ValueError):
    """A message of the books that this gpubill cannot read; str() says why (one line)."""


class Row(BaseModel):
    """One row of a projected table: its fields are the table's columns, in order."""

    model_config = _FROZEN
    TABLE: ClassVar[str]

    @classmethod
    def columns(cls) -> tuple[str, ...]:
        return tuple(cls.model_fields)

    def values(self) -> tuple:
        return tuple(getattr(self, name) for name in type(self).model_fields)


# ------------------------------------------------------------------------------------ rows


class TenantRow(Row):
    TABLE: ClassVar[str] = "tenants"
    tenant: str
    display_name: str
    status: str
    created_at: datetime
    updated_at: datetime
    note: str = ""
    legal_name: str = ""
    tax_id: str = ""
    address: str = ""
    email: str = ""


class TopUpRow(Row):
    TABLE: ClassVar[str] = "balance_ledger"
    ref: str
    tenant: str
    amount: Decimal
    note: str
    created_at: datetime


class BudgetRow(Row):
    TABLE: ClassVar[str] = "budgets"
    tenant: str
    amount: Decimal | None
    note: str
    updated_at: datetime


class ApiKeyRow(Row):
    TABLE: ClassVar[str] = "api_keys"
    id: str
    tenant: str
    role: str
    label: str
    secret_sha256: str  # the hash, never the secret
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    updated_at: datetime


class InvoiceHeaderRow(Row):
    TABLE: ClassVar[str] = "invoices"
    id: str
    number: str
    year: int
    seq: int
    tenant: str
    period: str
    status: str
    revision: int
    replaces: str
    issued_at: datetime
    updated_at: datetime
    currency: str
    subtotal: Decimal
    credit_used: Decimal
    net: Decimal
    tax: Decimal
    total: Decimal
    vat_rate: Decimal
    rules_revision: str


class InvoiceLineRow(Row):
    TABLE: ClassVar[str] = "invoice_lines"
    id: str
    revision: int
    number: str
    tenant: str
    period: str
    line_no: int
    kind: str
    gpu_model: str | None
    plan: str | None
    site: str | None
    band: str | None
    pue: Decimal | None
    ref_period: str | None
    credit_id: str | None
    description: str
    quantity: Decimal
    unit: str
    unit_price: Decimal
    amount: Decimal
    exact_amount: str  # the unrounded amount, "n" or "n/d"


class JournalRow(Row):
    TABLE: ClassVar[str] = "invoice_journal"
    at: datetime
    action: str
    invoice: str
    document: str
    tenant: str
    period: str
    actor: str
    reason: str
    detail: str


class CreditNoteRow(Row):
    TABLE: ClassVar[str] = "credit_notes"
    number: str
    year: int
    seq: int
    invoice: str
    tenant: str
    period: str
    reason: str
    note: str
    actor: str
    issued_at: datetime
    currency: str
    subtotal: Decimal
    tax: Decimal
    total: Decimal
    vat_rate: Decimal


class CreditNoteLineRow(Row):
    TABLE: ClassVar[str] = "credit_note_lines"
    number: str
    line_no: int
    invoice: str
    invoice_line_no: int
    kind: str
    description: str
    amount: Decimal


class BillingRunRow(Row):
    TABLE: ClassVar[str] = "billing_runs"
    period: str
    completed_at: datetime
    invoices: int


class RerateRunRow(Row):
    TABLE: ClassVar[str] = "rerate_runs"
    period: str
    generation: int
    rules_revision: str
    corrections: int
    hours: int
    seconds_written: int
    seconds_deleted: int
    started_at: datetime
    finished_at: datetime


class InvoicePartiesRow(Row):
    """The seller and buyer an issued invoice printed, as issued (JSON objects of their fields)."""

    TABLE: ClassVar[str] = "invoice_parties"
    id: str
    number: str
    seller: str
    buyer: str


class PaymentRow(Row):
    """A payment received (issue 38): a bank transfer, a top-up, a bank statement's line."""

    TABLE: ClassVar[str] = "payments"
    ref: str
    tenant: str
    amount: Decimal  # CNY, > 0
    method: str  # bank | alipay | wechat | card | other
    received_on: date  # billing time zone
    source: str  # manual | bank_import | top_up
    bank_txn: str  # the bank's transaction id ('' unless imported)
    payer: str
    remittance: str
    note: str
    actor: str
    recorded_at: datetime


class PaymentReversalRow(Row):
    TABLE: ClassVar[str] = "payment_reversals"
    ref: str
    tenant: str
    amount: Decimal
    reason: str
    reversed_on: date
    actor: str
    recorded_at: datetime


class AllocationRow(Row):
    """An amount of a source (a payment, a credit note) on an invoice; negative: undone by a reversal."""

    TABLE: ClassVar[str] = "allocations"
    id: str
    tenant: str
    invoice: str
    source_kind: str  # payment | credit_note
    source: str  # the payment's ref or the credit note's number
    amount: Decimal
    effective_on: date  # the later of the source's date and the invoice's issue date
    reason: str  # payment | credit | credit_note | reversal | apply
    recorded_at: datetime


class WriteOffRow(Row):
    """Part of an invoice marked uncollectible; negative: recovered by a later payment or credit note (source)."""

    TABLE: ClassVar[str] = "write_offs"
    id: str
    tenant: str
    invoice: str
    amount: Decimal
    reason: str
    source: str  # '' for a write-off, the payment ref or credit note number of a recovery
    written_on: date
    actor: str
    recorded_at: datetime


class RefundRow(Row):
    """Credit paid back to the tenant out of band (a credit note's part beyond what was outstanding)."""

    TABLE: ClassVar[str] = "refunds"
    ref: str
    tenant: str
    credit_note: str
    amount: Decimal
    paid_on: date
    note: str
    actor: str
    recorded_at: datetime


class InvoiceTermsRow(Row):
    """An issued invoice's issue and due dates as printed (the terms in force at its issue)."""

    TABLE: ClassVar[str] = "invoice_terms"
    number: str
    tenant: str
    issued_on: date
    due_on: date


class DunningNoticeRow(Row):
    """A dunning event produced for an invoice (issue 38): each (invoice, kind, days) once."""

    TABLE: ClassVar[str] = "dunning_notices"
    invoice: str
    tenant: str
    kind: str  # invoice_overdue | suspend_new_rentals
    days: int  # past the due date
    event_id: str
    due_on: date
    sent_at: datetime


class RuleSetRow(Row):
    TABLE: ClassVar[str] = "rule_sets"
    revision: str
    files: str  # JSON: file name → its text, as loaded
    first_loaded_at: datetime


# ----------------------------------------------------------------------------------- facts


class _Fact(BaseModel):
    model_config = _FROZEN

    def rows(self) -> tuple[Row, ...]:
        """What the fact writes, in the order the projection writes it (headers after their lines)."""
        raise NotImplementedError

    def key(self) -> str:
        """The Kafka key: the tenant the fact is about ('' where none)."""
        return ""


class TenantFact(_Fact):
    kind: Literal["tenant_registered", "tenant_updated", "tenant_suspended", "tenant_resumed"]
    tenant: TenantRow

    def rows(self) -> tuple[Row, ...]:
        return (self.tenant,)

    def key(self) -> str:
        return self.tenant.tenant


class TopUpRecorded(_Fact):
    """A top-up: a payment held as prepaid credit (issue 38), allocated like any payment. A fact
    written before payments existed carries no payment: its payment is derived from the top-up
    (received on its UTC date), as migration 0027 derives it for tables of that time."""

    kind: Literal["top_up"]
    top_up: TopUpRow
    payment: PaymentRow | None = None
    allocations: tuple[AllocationRow, ...] = ()
    write_offs: tuple[WriteOffRow, ...] = ()

    def rows(self) -> tuple[Row, ...]:
        payment = self.payment or PaymentRow(
            ref=self.top_up.ref, tenant=self.top_up.tenant, amount=self.top_up.amount, method="other",
            received_on=self.top_up.created_at.date(), source="top_up", bank_txn="", payer="", remittance="",
            note=self.top_up.note, actor="", recorded_at=self.top_up.created_at)
        return (self.top_up, payment, *self.allocations, *self.write_offs)

    def key(self) -> str:
        return self.top_up.tenant


class BudgetSet(_Fact):
    kind: Literal["budget_set"]
    budget: BudgetRow

    def rows(self) -> tuple[Row, ...]:
        return (self.budget,)

    def key(self) -> str:
        return self.budget.tenant


class ApiKeyFact(_Fact):
    kind: Literal["api_key_created", "api_key_revoked"]
    key_row: ApiKeyRow

    def rows(self) -> tuple[Row, ...]:
        return (self.key_row,)

    def key(self) -> str:
        return self.key_row.tenant


class Party(BaseModel):
    """A seller or buyer as a document printed it when the fact was recorded."""

    model_config = _FROZEN
    details: dict[str, str | None]

    def json(self) -> str:
        return orjson.dumps(self.details, option=orjson.OPT_SORT_KEYS).decode()


class InvoiceFact(_Fact):
    """A change of an invoice's state: a draft made or refreshed, an invoice issued or voided.
    `lines` are the lines this change writes (a new revision), none when the header names lines
    written before; `journal` its entries. An issued invoice carries its seller and buyer."""

    kind: Literal["draft_made", "draft_refreshed", "invoice_issued", "invoice_voided"]
    header: InvoiceHeaderRow
    lines: tuple[InvoiceLineRow, ...] = ()
    journal: tuple[JournalRow, ...] = ()
    seller: Party | None = None
    buyer: Party | None = None
    terms: InvoiceTermsRow | None = None  # issued: its issue and due dates
    allocations: tuple[AllocationRow, ...] = ()  # issued: the tenant's unapplied credit applied to it

    def rows(self) -> tuple[Row, ...]:
        parties: tuple[Row, ...] = ()
        if self.kind == "invoice_issued" and self.buyer is not None:
            parties = (InvoicePartiesRow(id=self.header.id, number=self.header.number,
                                         seller=self.seller.json() if self.seller is not None else "",
                                         buyer=self.buyer.json()),)
        terms = (self.terms,) if self.terms is not None else ()
        return (*self.lines, *parties, *terms, self.header, *self.allocations, *self.journal)

    def key(self) -> str:
        return self.header.tenant


class CreditNoteIssued(_Fact):
    """A credit note, with what it does to the account (issue 38): first an allocation to its own
    invoice of what was outstanding there (a recovery of a write-off beyond it), the rest held as
    credit or, with `refund`, paid back out of band."""

    kind: Literal["credit_note_issued"]
    note: CreditNoteRow
    lines: tuple[CreditNoteLineRow, ...]
    journal: tuple[JournalRow, ...] = ()
    allocations: tuple[AllocationRow, ...] = ()
    write_offs: tuple[WriteOffRow, ...] = ()
    refund: RefundRow | None = None

    def rows(self) -> tuple[Row, ...]:
        refund = (self.refund,) if self.refund is not None else ()
        return (*self.lines, self.note, *self.allocations, *self.write_offs, *refund, *self.journal)

    def key(self) -> str:
        return self.note.tenant


class BillingRunCompleted(_Fact):
    kind: Literal["billing_run_completed"]
    run: BillingRunRow

    def rows(self) -> tuple[Row, ...]:
        return (self.run,)


class ReratePublished(_Fact):
    kind: Literal["rerate_published"]
    run: RerateRunRow

    def rows(self) -> tuple[Row, ...]:
        return (self.run,)


class PaymentRecorded(_Fact):
    """A payment received, with its allocations to invoices (and recoveries of write-offs they reach)."""

    kind: Literal["payment_recorded"]
    payment: PaymentRow
    allocations: tuple[AllocationRow, ...] = ()
    write_offs: tuple[WriteOffRow, ...] = ()

    def rows(self) -> tuple[Row, ...]:
        return (self.payment, *self.allocations, *self.write_offs)

    def key(self) -> str:
        return self.payment.tenant


class PaymentReversed(_Fact):
    """A payment bounced or recorded by mistake: undone by a fact, never edited — every allocation
    and recovery it made is undone by a negative one."""

    kind: Literal["payment_reversed"]
    reversal: PaymentReversalRow
    allocations: tuple[AllocationRow, ...] = ()
    write_offs: tuple[WriteOffRow, ...] = ()

    def rows(self) -> tuple[Row, ...]:
        return (self.reversal, *self.allocations, *self.write_offs)

    def key(self) -> str:
        return self.reversal.tenant


class CreditApplied(_Fact):
    """A tenant's unapplied credit allocated to its outstanding invoices (`gpubill payment apply`)."""

    kind: Literal["credit_applied"]
    tenant: str
    allocations: tuple[AllocationRow, ...]
    write_offs: tuple[WriteOffRow, ...] = ()

    def rows(self) -> tuple[Row, ...]:
        return (*self.allocations, *self.write_offs)

    def key(self) -> str:
        return self.tenant


class InvoiceWrittenOff(_Fact):
    """What remains of an invoice marked uncollectible (a later payment still counts: a recovery)."""

    kind: Literal["invoice_written_off"]
    write_off: WriteOffRow
    journal: tuple[JournalRow, ...] = ()

    def rows(self) -> tuple[Row, ...]:
        return (self.write_off, *self.journal)

    def key(self) -> str:
        return self.write_off.tenant


class DunningNoticeSent(_Fact):
    kind: Literal["dunning_notice"]
    notice: DunningNoticeRow

    def rows(self) -> tuple[Row, ...]:
        return (self.notice,)

    def key(self) -> str:
        return self.notice.tenant


class RuleSetLoaded(_Fact):
    kind: Literal["rules_loaded"]
    rule_set: RuleSetRow

    def rows(self) -> tuple[Row, ...]:
        return (self.rule_set,)


Fact = Annotated[
    Union[TenantFact, TopUpRecorded, BudgetSet, ApiKeyFact, InvoiceFact, CreditNoteIssued, BillingRunCompleted,
          ReratePublished, RuleSetLoaded, PaymentRecorded, PaymentReversed, CreditApplied, InvoiceWrittenOff,
          DunningNoticeSent],
    Field(discriminator="kind"),
]


class BooksEvent(BaseModel):
    model_config = _FROZEN

    v: int = BOOKS_SCHEMA_VERSION
    at: datetime  # when the fact was recorded (the writer's clock)
    writer: str  # host:pid of the command that recorded it
    fact: Fact


_EVENT = TypeAdapter(BooksEvent)


def encode_event(event: BooksEvent) -> bytes:
    """The message value: compact JSON, Decimal as text."""
    return _EVENT.dump_json(event)


def decode_event(raw: bytes | None) -> BooksEvent:
    """The event of one message value; UnreadableFact (one line) when it is not one this code reads."""
    try:
        document = orjson.loads(raw or b"")
    except orjson.JSONDecodeError as exc:
        raise UnreadableFact(f"not JSON ({exc})") from None
    if not isinstance(document, dict):
        raise UnreadableFact("not a JSON object")
    version = document.get("v")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise UnreadableFact(f"schema version {version!r} is not a positive integer")
    if version > BOOKS_SCHEMA_VERSION:
        raise UnreadableFact(f"schema version {version} is newer than this gpubill reads ({BOOKS_SCHEMA_VERSION}): "
                             "upgrade gpubill before it projects the books")
    try:
        return _EVENT.validate_python(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise UnreadableFact(f"{where}: {first['msg']}") from None
