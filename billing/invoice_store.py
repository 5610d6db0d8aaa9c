"""Invoices as stored (migration 0020): headers with their state, lines by revision, numbers.

    headers(db, tenant=, period=, status=, key=)  -> [IssuedInvoice without lines]   (FINAL: each id's latest row)
    load(db, header) / find(db, key, tenant=)     -> IssuedInvoice with its lines     (key: a number or a draft id)
    current(db, tenant, period)                   -> the issued invoice, else the draft (never a voided one)
    line_rows(doc_id, revision, draft)            the rows a fact carries (billing/books.py records them),
    header_row(draft, ...)                        the header: the commit point of the lines it names
    next_number(db, year)                         the next gap-free GB-YYYY-NNNNNN (read just before the header)
    delete_stray_lines(db)                        lines no header names (a crash, a refreshed draft's old revision)

A header row is written for every change of state (made, refreshed, issued, voided); FINAL
keeps an id's latest by `updated_at`, this host's clock at the write (state changes of one id
are made under the invoicing lease, seconds apart). Writes need the lease (billing/invoice_lock.py).
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, replace
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

import orjson

from billing.errors import NotFound
from billing_rules import InvoiceDraft, InvoiceLine, IssuedInvoice
from schemas.books import InvoiceHeaderRow, InvoiceLineRow, Party
from warehouse.cluster import mutation_target

__all__ = [
    "CURRENCY", "HEADER_COLUMNS", "LINE_FIELDS", "charged", "current", "delete_stray_lines", "find", "headers", "line_of_row",
    "BUYER_FIELDS", "buyer_party", "header_row", "line_rows", "load", "new_draft_id", "next_number", "parties",
    "same_figures", "seller_party", "stored_issue_time",
]

CURRENCY = "CNY"
STATUSES = ("draft", "issued", "voided")
# A stored line is a billing_rules.InvoiceLine: these fields (exact_amount as "n/d" text),
# after the invoice it belongs to and its position.
LINE_FIELDS = (
    "kind", "gpu_model", "plan", "site", "band", "pue", "ref_period", "credit_id", "description", "quantity", "unit",
    "unit_price", "amount", "exact_amount",
)
LINE_COLUMNS = ("id", "revision", "number", "tenant", "period", "line_no", *LINE_FIELDS)
HEADER_COLUMNS = (
    "id", "number", "year", "seq", "tenant", "period", "status", "revision", "replaces", "issued_at", "updated_at",
    "currency", "subtotal", "credit_used", "net", "tax", "total", "vat_rate", "rules_revision",
)
_READ_COLUMNS = ("id", "number", "tenant", "period", "status", "revision", "replaces", "issued_at", "currency",
                 "subtotal", "credit_used", "net", "tax", "total", "vat_rate", "rules_revision")


def new_draft_id() -> str:
    """A draft's id: DRAFT- and 12 hex digits (a draft has no number until it is issued)."""
    return f"DRAFT-{uuid.uuid4().hex[:12].upper()}"


def headers(db: Any, *, tenant: str | None = None, period: str | None = None, status: str | tuple[str, ...] | None = None,
            key: str | None = None) -> list[IssuedInvoice]:
    """The latest state of each matching invoice (lines not read: `load` reads them), by period, then number."""
    where, params = [], {}
    for name, value in (("tenant", tenant), ("period", period)):
        if value is not None:
            where.append(f"{name} = {{{name}:String}}")
            params[name] = value
    if status is not None:
        where.append("status IN {statuses:Array(String)}")
        params["statuses"] = [status] if isinstance(status, str) else list(status)
    if key is not None:
        where.append("(id = {key:String} OR (number = {key:String} AND number != ''))")
        params["key"] = key
    sql = (f"SELECT {', '.join(_READ_COLUMNS)} FROM invoices FINAL"
           + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY period, number = '', number, tenant, issued_at, id")
    return [_header_of(row) for row in db.query(sql, params)]


def _header_of(row: tuple) -> IssuedInvoice:
    fields = dict(zip(_READ_COLUMNS, row, strict=True))
    issued = fields.pop("issued_at")
    issued = issued.replace(tzinfo=UTC) if issued.tzinfo is None else issued
    return IssuedInvoice(
        **fields, lines=(), issued_at=issued.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"))


def load(db: Any, header: IssuedInvoice) -> IssuedInvoice:
    """`header` with the lines of its revision, in line order."""
    sql = (f"SELECT {', '.join(LINE_FIELDS)} FROM invoice_lines FINAL "
           "WHERE tenant = {t:String} AND period = {p:String} AND id = {i:String} AND revision = {r:UInt32} ORDER BY line_no")
    rows = db.query(sql, {"t": header.tenant, "p": header.period, "i": header.id, "r": header.revision})
    return replace(header, lines=tuple(line_of_row(row) for row in rows))


def find(db: Any, key: str, *, tenant: str | None = None) -> IssuedInvoice:
    """The invoice whose number or draft id is `key` (of `tenant` when given), with its lines; NotFound without one."""
    found = headers(db, key=key, tenant=tenant)
    if not found:
        raise NotFound(f"no invoice {key!r}" + (f" of tenant {tenant!r}" if tenant is not None else ""))
    return load(db, found[0])


def current(db: Any, tenant: str, period: str, *, drafts: bool = True) -> IssuedInvoice:
    """`tenant`'s invoice for `period` that stands: the issued one, else (with `drafts`) the draft; never a voided one.
    NotFound when there is neither."""
    found = headers(db, tenant=tenant, period=period, status=("issued", "draft") if drafts else "issued")
    issued = [h for h in found if h.status == "issued"]
    if not (issued or found):
        raise NotFound(f"no invoice for tenant {tenant!r} in {period}")
    return load(db, (issued or found)[-1])


def next_number(db: Any, year: int) -> tuple[str, int]:
    """The next invoice number of `year` and its sequence number: one more than the highest issued so far."""
    seq = int(db.query("SELECT max(seq) FROM invoices FINAL WHERE year = {y:UInt16} AND number != ''",
                       {"y": year})[0][0] or 0) + 1
    return f"GB-{year}-{seq:06d}", seq


def line_rows(doc_id: str, revision: int, draft: InvoiceDraft, number: str = "") -> tuple[InvoiceLineRow, ...]:
    """`draft`'s lines as revision `revision` of invoice `doc_id` (numbered `number` when it is
    issued as it is written): what a fact carries; they count once a header names them."""
    return tuple(InvoiceLineRow(**dict(zip(LINE_COLUMNS, (doc_id, revision, number, draft.tenant, draft.period, line_no,
                                                          *_stored_fields(line)), strict=True)))
                 for line_no, line in enumerate(draft.lines, start=1))


def header_row(draft: InvoiceDraft, *, doc_id: str, status: str, revision: int, issued_at: datetime,
               number: str = "", seq: int = 0, replaces: str = "", rules_revision: str = "") -> InvoiceHeaderRow:
    """The header of `doc_id` in `status`: the commit point of its lines of `revision`, priced by
    the rule set of `rules_revision`; stamped now (`updated_at`: the latest row of an id wins)."""
    if status not in STATUSES:
        raise ValueError(f"invoice status {status!r} is not one of {', '.join(STATUSES)}")
    year = int(number[3:7]) if number else 0
    return InvoiceHeaderRow(**dict(zip(HEADER_COLUMNS, (
        doc_id, number, year, seq, draft.tenant, draft.period, status, revision, replaces, issued_at,
        datetime.now(UTC), CURRENCY, draft.subtotal, draft.credit_used, draft.net, draft.tax, draft.total, draft.vat_rate,
        rules_revision,
    ), strict=True)))


BUYER_FIELDS = ("tenant", "display_name", "legal_name", "tax_id", "address", "email")


def seller_party(seller: Any) -> Party | None:
    """The rules' seller (billing_rules.Seller) as an issued invoice keeps it; None without one."""
    return None if seller is None else Party(details=asdict(seller))


def buyer_party(tenant: str, registered: Any) -> Party:
    """The buyer as an issued invoice keeps it: the registry's row (billing.tenants.Tenant) now, or
    the id alone for a tenant that is not registered."""
    if registered is None:
        return Party(details={name: tenant if name == "tenant" else "" for name in BUYER_FIELDS})
    return Party(details={name: getattr(registered, name) for name in BUYER_FIELDS})


def parties(db: Any, doc_id: str) -> tuple[dict | None, dict] | None:
    """(seller, buyer) as invoice `doc_id` was issued with them, None for one issued before issue 37
    (or a draft): its documents then print the rules' seller and the registry's buyer of today."""
    rows = db.query("SELECT seller, buyer FROM invoice_parties FINAL WHERE id = {i:String}", {"i": doc_id})
    if not rows:
        return None
    seller, buyer = rows[0]
    return (orjson.loads(seller) if seller else None), orjson.loads(buyer)


def stored_issue_time(db: Any, header: IssuedInvoice) -> datetime:
    """`header`'s issue time as stored, to the millisecond (its RFC 3339 text is cut to the second)."""
    at = db.query("SELECT issued_at FROM invoices FINAL WHERE tenant = {t:String} AND period = {p:String} "
                  "AND id = {i:String}", {"t": header.tenant, "p": header.period, "i": header.id})[0][0]
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at


def same_figures(a: InvoiceDraft, b: InvoiceDraft) -> bool:
    """True when two drafts have the same lines (every stored field) and totals."""
    totals = ("subtotal", "credit_used", "net", "tax", "total", "vat_rate")
    return (tuple(map(_stored_fields, a.lines)) == tuple(map(_stored_fields, b.lines))
            and all(getattr(a, n) == getattr(b, n) for n in totals))


_STRAY_SQL = (
    "SELECT DISTINCT id, revision, tenant, period FROM invoice_lines "
    "WHERE (id, revision, tenant, period) NOT IN (SELECT id, revision, tenant, period FROM invoices FINAL)"
)


def delete_stray_lines(db: Any) -> list[tuple[str, int, str, str]]:
    """Delete the lines no invoice header names — what a run that crashed between an invoice's
    lines and its header left, and a refreshed draft's earlier revision — and return their
    (id, revision, tenant, period). Call it holding the invoicing lease: then no run is about
    to write their header."""
    stray = [tuple(row) for row in db.query(_STRAY_SQL)]
    if stray:  # a DELETE is a mutation of the table: only when there is something to delete
        db.command(f"DELETE FROM {mutation_target('invoice_lines', db.cluster)} WHERE (id, revision, tenant, period) "
                   "NOT IN (SELECT id, revision, tenant, period FROM invoices FINAL)")
    return stray


def _stored_fields(line: InvoiceLine) -> tuple:
    """`line` as the values of LINE_FIELDS; the exact amount as text, "n" or "n/d"."""
    exact = Fraction(line.exact_amount)
    text = str(exact.numerator) if exact.denominator == 1 else f"{exact.numerator}/{exact.denominator}"
    return (*(getattr(line, name) for name in LINE_FIELDS[:-1]), text)


def line_of_row(row: tuple) -> InvoiceLine:
    """The InvoiceLine stored as `row` (the values of LINE_FIELDS)."""
    fields = dict(zip(LINE_FIELDS, row, strict=True))
    text = fields["exact_amount"]
    fields["exact_amount"] = Fraction(text) if text else Fraction(fields["amount"])
    return InvoiceLine(**fields)


_CHARGED_SQL = """
SELECT i.tenant, i.period, sum(i.total) - sum(c.credited) AS charged
FROM (SELECT number, tenant, period, status, total FROM invoices FINAL
      WHERE status IN ('issued', 'voided') {where}) AS i
LEFT JOIN (SELECT invoice, sum(total) AS credited FROM credit_notes FINAL GROUP BY invoice) AS c ON i.number = c.invoice
GROUP BY i.tenant, i.period
HAVING countIf(i.status = 'issued') > 0
"""


def charged(db: Any, tenant: str | None = None) -> dict[str, dict[str, Decimal]]:
    """Tenant → period → what its invoices of the period charge with VAT, less their credit
    notes, for the periods with an issued invoice. A period whose invoices are all voided is
    left out: a void credits everything, so it charges nothing until its replacement is issued."""
    rows = db.query(_CHARGED_SQL.format(where="AND tenant = {t:String}" if tenant is not None else ""),
                    {"t": tenant} if tenant is not None else {})
    out: dict[str, dict[str, Decimal]] = {}
    for who, period, amount in rows:
        out.setdefault(who, {})[period] = Decimal(amount)
    return out
