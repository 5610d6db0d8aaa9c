"""The billing run: invoice every tenant with charges in a period, once, gap-free.

Steps for `run_period(db, rules, period)`:

1. Read the invoices that already exist for the period; a tenant that has one is done —
   a finalized invoice is never changed, so re-running a period is a no-op for it.
2. For the other tenants, read rated usage (rent seconds, allocated energy) and any late
   data for earlier, already-finalized periods (as adjustments with a reference to their
   period), and the credit still available (the new-tenant trial credit only for a tenant
   registered and active at the run: billing/tenants.py); `billing_rules.build_invoice`
   does the money.
3. Number the invoice (sequential per year, no gaps: the next number is read from the
   stored invoices just before the write) and write its lines, then its header row. The
   header is the commit point: lines without a header are leftovers of a crash.

Steps 1-3 run under the invoicing lease (billing/invoice_lock.py): one invoice run at a
time per database, whichever process starts it (`gpubill invoice run`, the scheduler).
Holding it, a run first deletes every line whose invoice has no header (the leftovers of a
run that crashed, of any period, so that they count neither as credit spent nor as billed),
and checks that it still holds the lease (the fence) just before each header. So numbers
are never issued twice, a tenant is invoiced once per period, and numbering has no gaps:
a number is only taken by a header, and a crashed run's number is re-used by the next.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from fractions import Fraction
from typing import Any, Callable

from billing_rules import (
    CreditBalance,
    Adjustment,
    InvoiceDraft,
    InvoiceLine,
    IssuedInvoice,
    build_invoice,
    credit_balances,
)
from billing.errors import NotFound
from billing.invoice_lock import invoicing_lease
from billing.tenants import registered_tenants, trial_tenants
from usage.by_tenant import plain, usage_by_tenant
from usage.failpoints import pause_at
from usage.queries import tenants_with_charges_sql
from usage.rated import coverage, rated_source, source_of
from usage.rollup import roll_up

CURRENCY = "CNY"
CHARGE_KINDS = ("rent", "discount", "electricity")
# A stored line is a billing_rules.InvoiceLine: these fields (exact_amount as "n/d" text),
# after the invoice it belongs to and its position.
LINE_FIELDS = (
    "kind", "gpu_model", "plan", "site", "band", "pue", "ref_period", "credit_id", "description", "quantity", "unit",
    "unit_price", "amount", "exact_amount",
)
LINE_COLUMNS = ("number", "tenant", "period", "line_no", *LINE_FIELDS)
HEADER_COLUMNS = (
    "number", "year", "seq", "tenant", "period", "status", "issued_at", "currency", "subtotal", "credit_used",
    "net", "tax", "total", "vat_rate",
)


@dataclass
class RunReport:
    period: str
    created: list[str] = field(default_factory=list)   # invoice numbers written by this run
    existing: list[str] = field(default_factory=list)  # invoices that were already final
    unregistered: list[str] = field(default_factory=list)  # tenants invoiced (without trial credit) but not registered


def _line_key(line: InvoiceLine) -> tuple:
    """What makes two lines about the same charge: grouping fields and unit price."""
    pue = str(plain(line.pue)) if line.pue is not None else ""
    return (line.gpu_model or "", line.plan or "", line.site or "", line.band or "", pue, str(plain(line.unit_price)))


_LATE_SQL = """
SELECT DISTINCT i.tenant, i.period
FROM (SELECT tenant, period, issued_at FROM invoices FINAL WHERE period < {p:String}) AS i
INNER JOIN (SELECT period, max(written_at) AS written_at FROM rated_writes WHERE period < {p:String} GROUP BY period) AS w
    ON i.period = w.period
WHERE w.written_at > i.issued_at - INTERVAL 1 HOUR  -- margin for clock skew between hosts: a
                                                    -- recompute that finds nothing new adds nothing
"""


def late_periods(db: Any, period: str) -> dict[str, list[str]]:
    """Tenant → their finalized periods before `period` that received rated data after the invoice.

    Only these can need adjustments: rated rows are only ever added or re-written (a late
    usage reading re-writes an energy row with the tenant), and every write stamps its hour
    in rated_writes with the database's clock. A written period is recomputed for each tenant
    invoiced in it; one whose figures did not change gets no adjustment.
    """
    late: dict[str, list[str]] = defaultdict(list)
    for tenant, ref in db.query(_LATE_SQL, {"p": period}):
        late[tenant].append(ref)
    return {tenant: sorted(refs) for tenant, refs in late.items()}


def pending_adjustments(db: Any, rules: Any, tenant: str, period: str, refs: list[str] | None = None) -> list[Adjustment]:
    """Late data for the tenant's finalized periods `refs` (default: all before `period`),
    as signed fen amounts.

    For each such period: recompute its rent, discount and electricity lines from the
    rated data as it is now, and compare each line's rounded amount and quantity with what
    was already invoiced for it (the original line plus adjustments on later invoices that
    reference the period, which carry the same grouping fields and unit price).
    """
    earlier = refs if refs is not None else [row[0] for row in db.query(
        "SELECT period FROM invoices FINAL WHERE tenant = {t:String} AND period < {p:String} ORDER BY period",
        {"t": tenant, "p": period},
    )]
    adjustments: list[Adjustment] = []
    for ref in earlier:
        rent, energy = usage_by_tenant(db, rated_source(db, rules, ref, tenant))
        now = build_invoice(tenant, ref, rent[tenant], energy[tenant], (), Decimal(0), Decimal(0))
        billed: dict[tuple, list] = defaultdict(lambda: [Decimal(0), Decimal(0), None])  # amount, quantity, line
        for line in [*_stored_lines(db, tenant, ref, kinds=CHARGE_KINDS), *_stored_lines_referencing(db, tenant, ref)]:
            entry = billed[_line_key(line)]
            entry[0] += line.amount
            entry[1] += line.quantity
            entry[2] = entry[2] or line
        for line in now.lines:
            amount, quantity, _ = billed.pop(_line_key(line), (Decimal(0), Decimal(0), None))
            if line.amount != amount:
                adjustments.append(_adjustment(line, ref, line.amount - amount, line.quantity - quantity))
        for amount, quantity, line in billed.values():  # charged then, no usage now (not expected)
            if amount:
                adjustments.append(_adjustment(line, ref, -amount, -quantity))
    return adjustments


def _adjustment(line: InvoiceLine, ref: str, amount: Decimal, quantity: Decimal) -> Adjustment:
    if line.kind == "electricity" or line.site:
        what = f"electricity {line.site} {line.band}"
    else:
        what = f"{line.gpu_model} {line.plan} {'discount' if line.unit_price < 0 else 'rent'}"
    return Adjustment(
        ref_period=ref, description=f"late usage for {ref}: {what}", amount=amount,
        gpu_model=line.gpu_model, plan=line.plan, site=line.site, band=line.band, pue=line.pue,
        quantity=quantity, unit=line.unit, unit_price=line.unit_price,
    )


def run_period(db: Any, rules: Any, period: str, *, now: datetime | None = None,
               progress: Callable[[str], None] | None = None,
               on_wait: Callable[[str], None] | None = None) -> RunReport:
    """Invoice every tenant with charges (or pending adjustments) in `period`. Idempotent,
    and safe beside another run: it waits for the invoicing lease (saying so to `on_wait`)."""
    rules.period_bounds(period)  # validates the period string
    now = now or datetime.now(timezone.utc)
    roll_up(db, rules, period=period)  # not needed for exactness (reads are exact), only for speed
    with invoicing_lease(db, on_wait=on_wait) as fence:
        delete_stray_lines(db)
        return _invoice_period(db, rules, period, now, fence, progress)


def _invoice_period(db: Any, rules: Any, period: str, now: datetime, fence: Callable[[], None],
                    progress: Callable[[str], None] | None) -> RunReport:
    """run_period's work, holding the lease; `fence` is called before each header."""
    report = RunReport(period=period)
    existing = {row[0]: row[1] for row in db.query(
        "SELECT tenant, number FROM invoices FINAL WHERE period = {p:String}", {"p": period})}
    source = source_of(coverage(db, rules, period), rules)
    tenants = {row[0] for row in db.query(tenants_with_charges_sql(source[0]), source[1])}
    late = late_periods(db, period)
    trial, registered = trial_tenants(db), registered_tenants(db)  # as the registry is at this run
    tenants |= set(late)
    rent, energy = usage_by_tenant(db, source)
    for tenant in sorted(tenants):
        if tenant in existing:
            report.existing.append(existing[tenant])
            continue
        adjustments = pending_adjustments(db, rules, tenant, period, late.get(tenant, []))
        if not rent.get(tenant) and not energy.get(tenant) and not adjustments:
            continue
        draft = _draft(db, rules, tenant, period, rent.get(tenant, ()), energy.get(tenant, ()), adjustments,
                       new_tenant=tenant in trial)
        number = _write_invoice(db, draft, now, fence)
        report.created.append(number)
        if tenant not in registered:
            report.unregistered.append(tenant)
        if progress:
            progress(number)
    db.insert("billing_runs", [[period, now, len(report.created) + len(report.existing)]], ["period", "completed_at", "invoices"])
    return report


def _draft(db: Any, rules: Any, tenant: str, period: str, rent: Any, energy: Any, adjustments: list[Adjustment],
           *, new_tenant: bool) -> InvoiceDraft:
    """The tenant's invoice for `period` from its usage and adjustments: credits still
    available (the trial credit when `new_tenant`), discounts and VAT as the rules say."""
    credits = invoice_credits(db, rules, tenant, period, new_tenant=new_tenant)
    return build_invoice(tenant, period, rent, energy, adjustments, credits, rules.vat_rate(period))


def invoice_credits(db: Any, rules: Any, tenant: str, period: str, *, new_tenant: bool) -> list[CreditBalance]:
    """What is left of the tenant's credit grants for `period` (the trial credit when
    `new_tenant`): the credits its invoice would spend, soonest-expiring first."""
    grants = rules.credit_grants(tenant, new_tenant=new_tenant)
    return credit_balances(grants, credit_spent(db, tenant, period), period)


def draft_invoice(db: Any, rules: Any, tenant: str, period: str, *, source: tuple[str, dict] | None = None) -> InvoiceDraft:
    """The invoice `run_period` would build for `tenant` and `period` if it ran now — same
    usage source, late-data adjustments, credits, discounts and VAT — writing nothing (no
    rollup, no lease, no number). For month-to-date estimates (billing/current_usage.py);
    `source` is the tenant's `rated_source` when the caller already has it."""
    rent, energy = usage_by_tenant(db, source or rated_source(db, rules, period, tenant))
    adjustments = pending_adjustments(db, rules, tenant, period, late_periods(db, period).get(tenant, []))
    return _draft(db, rules, tenant, period, rent.get(tenant, ()), energy.get(tenant, ()), adjustments,
                  new_tenant=tenant in trial_tenants(db))


def credit_spent(db: Any, tenant: str, period: str) -> dict[str, Decimal]:
    """Grant id → credit the tenant's invoices before `period` spent of it."""
    rows = db.query(
        "SELECT credit_id, -sum(amount) FROM invoice_lines FINAL "
        "WHERE tenant = {t:String} AND period < {p:String} AND kind = 'credit' GROUP BY credit_id",
        {"t": tenant, "p": period},
    )
    return {credit_id or "": Decimal(spent) for credit_id, spent in rows}


_STRAY_SQL = (
    "SELECT DISTINCT number, tenant, period FROM invoice_lines "
    "WHERE (number, tenant, period) NOT IN (SELECT number, tenant, period FROM invoices FINAL)"
)


def delete_stray_lines(db: Any) -> list[tuple[str, str, str]]:
    """Delete the lines whose invoice has no header — what a run that crashed between an
    invoice's lines and its header left — and return their (number, tenant, period).
    Call it holding the invoicing lease: then no run is about to write their header."""
    stray = [tuple(row) for row in db.query(_STRAY_SQL)]
    if stray:  # a DELETE is a mutation of the table: only when there is something to delete
        db.command("DELETE FROM invoice_lines WHERE (number, tenant, period) NOT IN "
                   "(SELECT number, tenant, period FROM invoices FINAL)")
    return stray


def _write_invoice(db: Any, draft: InvoiceDraft, now: datetime, fence: Callable[[], None]) -> str:
    """Number the draft, write its lines, then (if `fence` passes) its header: the commit
    point. Needs the invoicing lease and no stray lines of the tenant (run_period sees to both)."""
    year = int(draft.period[:4])
    seq = int(db.query("SELECT max(seq) FROM invoices FINAL WHERE year = {y:UInt16}", {"y": year})[0][0] or 0) + 1
    number = f"GB-{year}-{seq:06d}"
    rows = [(number, draft.tenant, draft.period, line_no, *_stored_fields(line))
            for line_no, line in enumerate(draft.lines, start=1)]
    db.insert("invoice_lines", rows, LINE_COLUMNS)
    _pause_before_header()
    fence()
    db.insert("invoices", [(
        number, year, seq, draft.tenant, draft.period, "finalized", now, CURRENCY, draft.subtotal, draft.credit_used,
        draft.net, draft.tax, draft.total, draft.vat_rate,
    )], HEADER_COLUMNS)
    return number


def _pause_before_header() -> None:
    """The failpoint `invoice-header` (usage/failpoints.py): between an invoice's lines and its header."""
    pause_at("invoice-header")


def _stored_fields(line: InvoiceLine) -> tuple:
    """`line` as the values of LINE_FIELDS; the exact amount as text, "n" or "n/d"."""
    exact = Fraction(line.exact_amount)
    text = str(exact.numerator) if exact.denominator == 1 else f"{exact.numerator}/{exact.denominator}"
    return (*(getattr(line, name) for name in LINE_FIELDS[:-1]), text)


def _line_of_row(row: tuple) -> InvoiceLine:
    """The InvoiceLine stored as `row` (the values of LINE_FIELDS)."""
    fields = dict(zip(LINE_FIELDS, row, strict=True))
    text = fields["exact_amount"]
    fields["exact_amount"] = Fraction(text) if text else Fraction(fields["amount"])
    return InvoiceLine(**fields)


def _stored_lines(db: Any, tenant: str, period: str, kinds: tuple[str, ...] | None = None) -> list[InvoiceLine]:
    sql = (
        f"SELECT {', '.join(LINE_FIELDS)} FROM invoice_lines FINAL "
        "WHERE tenant = {t:String} AND period = {p:String} ORDER BY line_no"
    )
    lines = [_line_of_row(row) for row in db.query(sql, {"t": tenant, "p": period})]
    return [line for line in lines if kinds is None or line.kind in kinds]


def _stored_lines_referencing(db: Any, tenant: str, ref: str) -> list[InvoiceLine]:
    sql = (
        f"SELECT {', '.join(LINE_FIELDS)} FROM invoice_lines FINAL "
        "WHERE tenant = {t:String} AND kind = 'adjustment' AND ref_period = {r:String}"
    )
    return [_line_of_row(row) for row in db.query(sql, {"t": tenant, "r": ref})]


def load_invoice(db: Any, tenant: str, period: str) -> IssuedInvoice:
    """The stored invoice of `tenant` for `period`; NotFound when there is none."""
    rows = db.query(
        "SELECT number, status, issued_at, currency, subtotal, credit_used, net, tax, total, vat_rate "
        "FROM invoices FINAL WHERE tenant = {t:String} AND period = {p:String}",
        {"t": tenant, "p": period},
    )
    if not rows:
        raise NotFound(f"no invoice for tenant {tenant!r} in {period}")
    number, status, issued_at, currency, subtotal, credit_used, net, tax, total, vat_rate = rows[0]
    issued = issued_at.replace(tzinfo=timezone.utc) if issued_at.tzinfo is None else issued_at
    return IssuedInvoice(
        tenant=tenant, period=period, number=number, status=status,
        issued_at=issued.isoformat(timespec="seconds").replace("+00:00", "Z"), currency=currency,
        subtotal=subtotal, credit_used=credit_used, net=net, tax=tax, total=total, vat_rate=vat_rate,
        lines=tuple(_stored_lines(db, tenant, period)),
    )


def list_invoices(db: Any, period: str) -> list[tuple[str, str, Decimal]]:
    """(number, tenant, total) of every invoice of a period."""
    return [tuple(r) for r in db.query(
        "SELECT number, tenant, total FROM invoices FINAL WHERE period = {p:String} ORDER BY number", {"p": period})]
