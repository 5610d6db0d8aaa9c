"""A bank statement recorded as payments (issue 38 item 2): `gpubill payment import FILE`.

    plan_import(db, rules, data, now=None) -> ImportPlan       read, matched, checked: what each line would do
    record_import(db, rules, plan, ...) -> [(Payment, bool)]    the plan's new payments, under one lease, all or none

The statement is read by schemas/bank_statement.py and each line matched by schemas/bank_matching.py (pure: an invoice
number in the remittance, else a registered tenant id in it; never guessed). Here each line
gets its fate against the books:

- `new`: matched, not imported yet: recorded as payment `bank-<txn_id>` (source `bank_import`,
  method `bank`, with its transaction id, payer and remittance), allocated to the invoices its
  remittance names — else as any payment is, oldest due date first — the rest held as credit;
- `imported`: its transaction id is recorded with the same date, amount, payer and remittance:
  skipped (importing a statement twice, or two that overlap, changes nothing);
- `unmatched`: listed for review, never recorded (a person records it with `payment record`).

A line is *bad* — the statement's own bad lines (schemas/bank_statement.py: a malformed line,
a duplicate transaction id) and those the books refuse (a transaction id recorded with other
content, a date after today). With one bad line the import writes nothing at all: every bad
line is reported, fixed in the file, and the file imported again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Literal

from billing import invoice_store
from billing.payments import Payment, PaymentRefused, check_received, check_text, payments, receipt, record_payments
from billing.tenants import registered_tenants
from schemas.bank_matching import Match, match_lines
from schemas.bank_statement import BadLine, BankLine, parse_statement

__all__ = ["ImportPlan", "PlannedLine", "plan_import", "record_import", "ref_of"]

SOURCE = "bank_import"


def ref_of(txn_id: str) -> str:
    """The payment's ref of the bank's transaction `txn_id`."""
    return f"bank-{txn_id}"


@dataclass(frozen=True)
class PlannedLine:
    """One receipt of the statement, matched, and what the import does with it."""

    match: Match
    fate: Literal["new", "imported", "unmatched"]
    recorded: Payment | None = None  # `imported`: the payment recorded before

    @property
    def line(self) -> BankLine:
        return self.match.line

    @property
    def ref(self) -> str:
        return ref_of(self.line.txn_id)


@dataclass(frozen=True)
class ImportPlan:
    """A statement read against the books: every receipt with its fate, and every bad line."""

    lines: tuple[PlannedLine, ...]  # in file order
    bad: tuple[BadLine, ...]  # by line number

    def having(self, fate: str) -> list[PlannedLine]:
        return [p for p in self.lines if p.fate == fate]


def plan_import(db: Any, rules: Any, data: bytes, *, now: datetime | None = None) -> ImportPlan:
    """`data` (the file's bytes) read, matched to the issued invoices and registered tenants, and
    each line's fate (the module docstring); writes nothing. InvalidStatement when the file as a
    whole cannot be read."""
    lines, bad = parse_statement(data)
    bad = list(bad)
    issued = {h.number: h.tenant for h in invoice_store.headers(db, status="issued") if h.number}
    matches = match_lines(lines, issued, registered_tenants(db))
    recorded = {p.ref: p for p in payments(db, refs=[ref_of(line.txn_id) for line in lines])} if lines else {}
    planned = []
    for match in matches:
        line = match.line
        problem = _problem(line, recorded.get(ref_of(line.txn_id)), rules, now)
        if problem:
            bad.append(BadLine(line.line_no, problem))
        elif ref_of(line.txn_id) in recorded:
            planned.append(PlannedLine(match, "imported", recorded[ref_of(line.txn_id)]))
        else:
            planned.append(PlannedLine(match, "new" if match.tenant is not None else "unmatched"))
    return ImportPlan(tuple(planned), tuple(sorted(bad, key=lambda b: b.line_no)))


def _problem(line: BankLine, recorded: Payment | None, rules: Any, now: datetime | None) -> str:
    """Why the books refuse `line` ('' when they take it)."""
    try:
        check_received(line.received_on, rules, now)
        payer, remittance = check_text(line.payer, "the payer"), check_text(line.remittance, "the remittance")
    except PaymentRefused as exc:
        return str(exc).replace("--received ", "the date ")
    if recorded is None:
        return ""
    same = (recorded.source, recorded.method, recorded.bank_txn, recorded.received_on, recorded.amount, recorded.payer,
            recorded.remittance) == (SOURCE, "bank", line.txn_id, line.received_on, line.amount, payer, remittance)
    if same:
        return ""
    return (f"transaction {line.txn_id} is already recorded as payment {recorded.ref} ({recorded.amount:.2f} CNY "
            f"received {recorded.received_on}{', payer ' + repr(recorded.payer) if recorded.payer else ''}) with other "
            "content: a bank's transaction id is one payment")


def record_import(db: Any, rules: Any, plan: ImportPlan, *, actor: str | None = None, now: datetime | None = None,
                  on_wait: Callable[[str], None] | None = None) -> list[tuple[Payment, bool]]:
    """Record the plan's `new` lines as payments, in file order, under one lease and in one append
    (billing.payments.record_payments): (payment, whether this call recorded it) for each. Refused
    (PaymentRefused, nothing written) when the plan has a bad line — the caller reports them."""
    if plan.bad:
        raise PaymentRefused(f"the statement has {len(plan.bad)} bad line{'s' if len(plan.bad) != 1 else ''}: "
                             "nothing was written")
    receipts = [receipt(db, rules, p.match.tenant, p.line.amount, p.ref, p.line.received_on, method="bank",
                        invoices=[(number, None) for number in p.match.invoices], source=SOURCE,
                        bank_txn=p.line.txn_id, payer=p.line.payer, remittance=p.line.remittance, now=now)
                for p in plan.having("new")]
    return record_payments(db, rules, receipts, actor=actor, now=now, on_wait=on_wait) if receipts else []
