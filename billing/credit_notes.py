"""Credit notes and void: how an issued invoice is corrected without changing it (SPEC §5).

    create_credit_note(db, rules, invoice_number, reason, lines=None | {line_no: amount}, note=, actor=)
    void_invoice(db, rules, invoice_number, reason_text, actor=)   a credit note for what is left, then `voided`
    creditable(db, invoice) -> Creditable                           what each line and the whole can still take
    credit_notes(db, tenant=, period=, invoice=) / find_credit_note(db, number, tenant=)
    parse_amount(text)                                             a CLI or API amount, refused unless plain fen

What a credit note may credit, per invoice (amounts before tax, in CNY):
    a charge line (rent, electricity, a positive adjustment): its amount − what credit notes credited of it
    the invoice: its net − what credit notes credited of it
A credit, discount or negative adjustment line is never credited by itself; a void (or
`--all`) gives it back: the note credits every charge line's remainder and takes back each
negative line in full, which adds up to the net still creditable. The credit a voided invoice
spent is then free again (billing/invoicing.py counts issued invoices only).

VAT is reversed at the invoice's rate, rounded once on the running total: the tax of a
note is round_fen((credited before + this) × rate) − round_fen(credited before × rate), so
the notes of an invoice never reverse more tax than it charged and the last one of a fully
credited invoice reverses exactly what is left.

Writes hold the invoicing lease (billing/invoice_lock.py), so two requests at once are
served one after the other, each reading what the other credited: never more than the
invoice. A note's lines are written first, its header last (the commit point); lines no
header names (a kill -9 between them) are deleted by the next command that holds the lease.
Credit notes are numbered CN-YYYY-NNNNNN, gap-free per year of issue (billing time zone).

    CreditNoteRefused(BillingError)   what was asked cannot be credited; nothing was written
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any, Callable

from billing import books
from billing import invoice_store as store
from billing.accounts import date_in
from billing.payments import credit_note_effects
from billing.errors import BillingError, NotFound
from billing.invoice_lock import invoicing_lease
from billing.journal import actor_here, entry
from billing_rules import IssuedInvoice
from billing_rules.money import round_fen
from schemas.books import CreditNoteIssued, CreditNoteLineRow, CreditNoteRow, InvoiceFact
from usage.failpoints import pause_at
from warehouse.cluster import mutation_target

__all__ = [
    "REASONS", "CreditNote", "CreditNoteLine", "CreditNoteRefused", "Creditable", "create_credit_note",
    "credit_notes", "creditable", "delete_stray_credit_note_lines", "find_credit_note", "parse_amount", "void_invoice",
]

REASONS = ("price_error", "usage_error", "duplicate", "goodwill", "void", "rerate")
CHARGE_KINDS = ("rent", "electricity", "adjustment")
MAX_NOTE_CHARS = 500
_HEADER = ("number", "year", "seq", "invoice", "tenant", "period", "reason", "note", "actor", "issued_at", "currency",
           "subtotal", "tax", "total", "vat_rate")
_LINE = ("number", "line_no", "invoice", "invoice_line_no", "kind", "description", "amount")


class CreditNoteRefused(BillingError):
    """A credit note or void that cannot be made as asked; nothing was written."""


@dataclass(frozen=True)
class CreditNoteLine:
    line_no: int
    invoice_line_no: int
    kind: str  # the invoice line's kind
    description: str
    amount: Decimal  # before tax; positive credits a charge, negative gives back a credit or discount


@dataclass(frozen=True)
class CreditNote:
    number: str  # CN-YYYY-NNNNNN
    invoice: str
    tenant: str
    period: str
    reason: str
    note: str
    actor: str
    issued_at: str  # RFC 3339, UTC
    currency: str
    subtotal: Decimal  # credited before tax (positive)
    tax: Decimal  # VAT reversed
    total: Decimal  # subtotal + tax: what returns to the tenant
    vat_rate: Decimal
    lines: tuple[CreditNoteLine, ...] = ()
    # what it did to the account when it was made (issue 38; None when read back): to its invoice, refunded
    to_invoice: Decimal | None = field(default=None, compare=False)
    refunded: Decimal | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Creditable:
    """What `invoice` can still take: per line number (charge lines only) and in total, before tax."""

    invoice: IssuedInvoice
    lines: dict[int, Decimal]  # line_no → amount still creditable
    net: Decimal  # net still creditable
    credited: Decimal  # net credited so far
    credited_tax: Decimal  # VAT reversed so far


def parse_amount(text: object, what: str = "amount") -> Decimal:
    """`text` as an amount to credit: digits with at most two decimals, above zero (no sign,
    exponent, NaN or infinity); the one parser of amounts (billing/balances.py), refused in one line."""
    from billing.balances import InvalidAmount, parse_amount as parse

    try:
        return parse(text, what)
    except InvalidAmount as exc:
        raise CreditNoteRefused(str(exc)) from None


def creditable(db: Any, invoice: IssuedInvoice) -> Creditable:
    """What credit notes already credited of `invoice`, and what each line and the whole can still take."""
    by_line: dict[int, Decimal] = {}
    for line_no, amount in db.query(
            "SELECT invoice_line_no, sum(amount) FROM credit_note_lines FINAL WHERE invoice = {n:String} "
            "AND number IN (SELECT number FROM credit_notes FINAL WHERE invoice = {n:String}) GROUP BY invoice_line_no",
            {"n": invoice.number}):
        by_line[int(line_no)] = Decimal(amount)
    credited, credited_tax = (Decimal(v or 0) for v in db.query(
        "SELECT sum(subtotal), sum(tax) FROM credit_notes FINAL WHERE invoice = {n:String}", {"n": invoice.number})[0])
    lines = {no: line.amount - by_line.get(no, Decimal(0))
             for no, line in enumerate(invoice.lines, start=1) if line.kind in CHARGE_KINDS and line.amount > 0}
    return Creditable(invoice, lines, invoice.net - credited, credited, credited_tax)


def create_credit_note(db: Any, rules: Any, invoice_number: str, reason: str, lines: dict[int, Decimal] | None = None,
                       *, note: str = "", actor: str | None = None, now: datetime | None = None,
                       on_wait: Callable[[str], None] | None = None, refund: str | None = None) -> CreditNote:
    """Credit `invoice_number` — `lines` (invoice line number → amount before tax), or with None
    everything still creditable — for `reason`; the note is issued at once. CreditNoteRefused
    (nothing written) for an unknown reason, a draft or voided invoice, a line it lacks or more
    than is creditable.

    What the note does to the account (issue 38; billing/payments.py credit_note_effects): it first
    reduces what the invoice still asks; the part beyond is the tenant's unapplied credit or, with
    `refund` (the refund's ref), paid back out of band — refused when there is no such part."""
    _check_reason(reason)
    note = _check_note(note)
    with invoicing_lease(db, on_wait=on_wait) as fence:
        delete_stray_credit_note_lines(db)
        invoice = _issued(db, invoice_number)
        fact = _credit_note_fact(db, rules, invoice, reason, lines, note, actor or actor_here(), now, refund=refund)
        pause_at("credit-note-header")
        fence()
        books.record(db, fact)
        return replace(find_credit_note(db, fact.note.number),
                       to_invoice=sum((a.amount for a in fact.allocations), Decimal("0.00")),
                       refunded=fact.refund.amount if fact.refund is not None else Decimal("0.00"))


def void_invoice(db: Any, rules: Any, invoice_number: str, reason: str, *, actor: str | None = None,
                 now: datetime | None = None, on_wait: Callable[[str], None] | None = None,
                 credit_reason: str = "void") -> tuple[IssuedInvoice, CreditNote | None]:
    """Void `invoice_number`: a credit note (reason `credit_reason`, `void` unless a re-rating
    voids it: `rerate`; `reason` as its note) for everything still creditable — none when
    nothing is — then the invoice `voided`. A later invoice run issues its replacement, which
    carries the period's goodwill notes as concessions (billing/concessions.py). Refused
    (billing.concessions.UnknownCreditNote, nothing written) when a note of the period has a
    reason this gpubill does not know. Returns (the voided invoice, the credit note or None)."""
    from billing.concessions import period_notes  # it reads the notes this module writes

    _check_reason(credit_reason)
    text = _check_note(reason)
    if not text:
        raise CreditNoteRefused("--reason is required: say why the invoice is voided")
    actor = actor or actor_here()
    with invoicing_lease(db, on_wait=on_wait) as fence:
        delete_stray_credit_note_lines(db)
        invoice = _issued(db, invoice_number, voiding=True)
        period_notes(db, invoice.tenant, invoice.period)  # every earlier note's reason known, or refused
        left = creditable(db, invoice)
        cn = _credit_note_fact(db, rules, invoice, credit_reason, None, text, actor, now) if left.net > 0 else None
        moment = now or datetime.now(UTC)
        voided = InvoiceFact(
            kind="invoice_voided",
            header=store.header_row(invoice, doc_id=invoice.id, status="voided", revision=invoice.revision,
                                    issued_at=store.stored_issue_time(db, invoice), number=invoice.number,
                                    seq=int(invoice.number[8:]), replaces=invoice.replaces,
                                    rules_revision=invoice.rules_revision),
            journal=(entry("voided", invoice=invoice.number, document=cn.note.number if cn else "",
                           tenant=invoice.tenant, period=invoice.period, actor=actor, reason=text,
                           detail=f"at {moment.isoformat(timespec='seconds')}"),))
        pause_at("credit-note-header")
        fence()
        books.record(db, *((cn,) if cn else ()), voided)  # the note and the void: both on the books, or neither
        return store.find(db, invoice.number), find_credit_note(db, cn.note.number) if cn else None


def _check_reason(reason: str) -> None:
    if reason not in REASONS:
        raise CreditNoteRefused(f"reason {reason!r} is not one of {', '.join(REASONS)}")


def _check_note(note: str) -> str:
    text = (note or "").strip()
    if len(text) > MAX_NOTE_CHARS:
        raise CreditNoteRefused(f"the note has {len(text)} characters; at most {MAX_NOTE_CHARS}")
    if any((ord(c) < 32 and c not in "\t") or 0x7F <= ord(c) < 0xA0 or 0x202A <= ord(c) <= 0x202E
           or 0x2066 <= ord(c) <= 0x2069 for c in text):
        raise CreditNoteRefused("the note holds control or bidirectional characters; write it on one plain line")
    return text


def _issued(db: Any, number: str, *, voiding: bool = False) -> IssuedInvoice:
    """The issued invoice numbered `number`, with its lines; refused for a draft or a voided one."""
    try:
        invoice = store.find(db, number)
    except NotFound:
        raise CreditNoteRefused(f"no invoice {number!r}; `gpubill invoice list` shows the numbers") from None
    if invoice.status == "draft":
        raise CreditNoteRefused(f"{number} is a draft: a draft is changed by `gpubill invoice run`, not credited; "
                                "issue it first")
    if invoice.status == "voided":
        raise CreditNoteRefused(f"{invoice.number} is already voided" + ("" if voiding else "; nothing more can be "
                                                                                           "credited"))
    return invoice


def _credit_note_fact(db: Any, rules: Any, invoice: IssuedInvoice, reason: str, amounts: dict[int, Decimal] | None,
                      note: str, actor: str, now: datetime | None, *, refund: str | None = None) -> CreditNoteIssued:
    """Check `amounts` against what is creditable, then number the note: the fact that issues it
    (holding the lease and the numbered series' writer; billing/books.py records it)."""
    left = creditable(db, invoice)
    lines = _lines_for(invoice, left, amounts)
    subtotal = sum((amount for _, _, _, amount in lines), Decimal("0.00"))
    if subtotal <= 0:
        raise CreditNoteRefused(f"{invoice.number} has nothing left to credit (net {invoice.net:.2f}, credited "
                                f"{left.credited:.2f})")
    rate = Fraction(invoice.vat_rate)
    tax = round_fen(Fraction(left.credited + subtotal) * rate) - round_fen(Fraction(left.credited) * rate)
    tax = min(tax, invoice.tax - left.credited_tax)  # never more VAT than the invoice charged
    moment = now or datetime.now(UTC)
    year = moment.astimezone(rules.billing_tz).year
    seq = int(db.query("SELECT max(seq) FROM credit_notes FINAL WHERE year = {y:UInt16}", {"y": year})[0][0] or 0) + 1
    number = f"CN-{year}-{seq:06d}"
    allocations, recoveries, refunded = credit_note_effects(
        db, rules, invoice, number, subtotal + tax, date_in(rules, moment), refund_ref=refund,
        at=moment.astimezone(UTC), actor=actor)
    return CreditNoteIssued(
        allocations=allocations, write_offs=recoveries, refund=refunded,
        kind="credit_note_issued",
        lines=tuple(CreditNoteLineRow(**dict(zip(_LINE, (number, no, invoice.number, line_no, kind, description, amount),
                                                 strict=True)))
                    for no, (line_no, kind, description, amount) in enumerate(lines, start=1)),
        note=CreditNoteRow(**dict(zip(_HEADER, (number, year, seq, invoice.number, invoice.tenant, invoice.period, reason,
                                                note, actor, moment, store.CURRENCY, subtotal, tax, subtotal + tax,
                                                invoice.vat_rate), strict=True))),
        journal=(entry("credit_note", invoice=invoice.number, document=number, tenant=invoice.tenant,
                       period=invoice.period, actor=actor, reason=reason,
                       detail=f"{subtotal + tax:.2f} {store.CURRENCY} with VAT" + (f": {note}" if note else "")),))


def _lines_for(invoice: IssuedInvoice, left: Creditable,
               amounts: dict[int, Decimal] | None) -> list[tuple[int, str, str, Decimal]]:
    """(invoice line no, kind, description, amount) of the note: `amounts` checked, or everything left."""
    if amounts is None:
        out = [(no, line.kind, line.description, left.lines[no]) for no, line in enumerate(invoice.lines, start=1)
               if no in left.lines and left.lines[no] > 0]
        out += [(no, line.kind, line.description, line.amount) for no, line in enumerate(invoice.lines, start=1)
                if line.amount < 0]  # credits, discounts, adjustments that lowered it: given back in full
        if sum(a for *_, a in out) != left.net:  # charges − credits − discounts is the net, less what was credited
            raise CreditNoteRefused(f"{invoice.number}: its lines less what was credited ({sum(a for *_, a in out):.2f}) "
                                    f"do not make the net still creditable ({left.net:.2f}); see `gpubill invoice "
                                    f"history {invoice.number}`")
        return out
    if not amounts:
        raise CreditNoteRefused("say what to credit: --all, or --line K=AMOUNT for each invoice line K")
    out = []
    for no in sorted(amounts):
        amount = amounts[no]
        if not 1 <= no <= len(invoice.lines):
            raise CreditNoteRefused(f"{invoice.number} has no line {no}; its lines are 1 to {len(invoice.lines)}")
        line = invoice.lines[no - 1]
        if no not in left.lines:
            what = f"a {line.kind} line" if line.amount > 0 or line.kind != "adjustment" else "a negative adjustment"
            raise CreditNoteRefused(f"line {no} of {invoice.number} is {what}: only charges (rent, electricity, "
                                    "adjustments that add) are credited; a void gives credits and discounts back")
        if not isinstance(amount, Decimal) or not amount.is_finite() or amount <= 0 or amount != amount.quantize(Decimal("0.01")):
            raise CreditNoteRefused(f"line {no}: amount {amount} must be more than zero, in whole fen")
        if amount > left.lines[no]:
            raise CreditNoteRefused(f"line {no} of {invoice.number} can take at most {left.lines[no]:.2f} more "
                                    f"(its amount {line.amount:.2f}), asked {amount:.2f}")
        out.append((no, line.kind, line.description, amount))
    asked = sum(a for *_, a in out)
    if asked > left.net:
        raise CreditNoteRefused(f"{invoice.number} can take at most {left.net:.2f} more before tax (net "
                                f"{invoice.net:.2f}, credited {left.credited:.2f}), asked {asked:.2f}")
    return out


def delete_stray_credit_note_lines(db: Any) -> list[str]:
    """Delete the credit note lines no header names (a crash between them); their note numbers.
    Call it holding the invoicing lease."""
    stray = [row[0] for row in db.query(
        "SELECT DISTINCT number FROM credit_note_lines WHERE number NOT IN (SELECT number FROM credit_notes)")]
    if stray:
        db.command(f"DELETE FROM {mutation_target('credit_note_lines', db.cluster)} "
                   "WHERE number NOT IN (SELECT number FROM credit_notes)")
    return stray


def credit_notes(db: Any, *, tenant: str | None = None, period: str | None = None,
                 invoice: str | None = None, number: str | None = None) -> list[CreditNote]:
    """The credit notes that match, in number order, without their lines."""
    where, params = [], {}
    for name, value in (("tenant", tenant), ("period", period), ("invoice", invoice), ("number", number)):
        if value is not None:
            where.append(f"{name} = {{{name}:String}}")
            params[name] = value
    rows = db.query(f"SELECT {', '.join(_HEADER)} FROM credit_notes FINAL"
                    + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY year, seq", params)
    return [_note_of(row) for row in rows]


def find_credit_note(db: Any, number: str, *, tenant: str | None = None) -> CreditNote:
    """The credit note `number` (of `tenant` when given) with its lines; NotFound without one."""
    found = credit_notes(db, number=number, tenant=tenant)
    if not found:
        raise NotFound(f"no credit note {number!r}" + (f" of tenant {tenant!r}" if tenant is not None else ""))
    rows = db.query("SELECT line_no, invoice_line_no, kind, description, amount FROM credit_note_lines FINAL "
                    "WHERE number = {n:String} ORDER BY line_no", {"n": number})
    lines = tuple(CreditNoteLine(int(no), int(inv_no), kind, description, Decimal(amount))
                  for no, inv_no, kind, description, amount in rows)
    return replace(found[0], lines=lines)


def _note_of(row: tuple) -> CreditNote:
    fields = dict(zip(_HEADER, row, strict=True))
    del fields["year"], fields["seq"]
    at = fields["issued_at"]
    at = at.replace(tzinfo=UTC) if at.tzinfo is None else at
    fields["issued_at"] = at.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    return CreditNote(**fields)
