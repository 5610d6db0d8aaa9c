"""The billing run: invoice every tenant with charges in a period, once, gap-free; drafts under review.

Steps for `run_period(db, rules, period)`:

1. Read the invoices of the period; a tenant whose invoice is issued is done — an issued
   invoice is never changed, so re-running a period is a no-op for it. A tenant whose only
   invoices are voided gets a replacement that names the latest of them.
2. For the other tenants, read rated usage (rent seconds, allocated energy) and any late
   data for earlier, issued periods (as adjustments with a reference to their period), and
   the credit still available (the new-tenant trial credit only for a tenant registered and
   active at the run: billing/tenants.py); a replacement also carries the goodwill credit
   notes of the invoices it replaces as concessions (billing/concessions.py);
   `billing_rules.build_invoice` does the money.
3. With `review = "auto"` (billing.toml, the default) the invoice is issued at once; with
   `"manual"` it is written as a draft (an id, no number), or an existing draft is refreshed
   when its figures changed (late data: a draft is a projection). `issue_period` issues the
   drafts after review, re-building each first: what it issues is what a run would build now.
4. Issuing numbers the invoice (sequential per year, no gaps: the next number is read from
   the stored invoices just before the write) and writes its lines, then its header row. A
   header is the commit point: lines no header names are leftovers of a crash.

Before step 1, a period's **first** run or issue (no invoice of it issued or voided yet) applies the
stored corrections that touch it to its rated data (`usage.regenerate.regenerate`, as `rerate
--apply` does, under the same lease): the first invoices include every correction stored, a
worker running or not (issue 36). Once an invoice is issued, a correction is applied by
`gpubill rerate --period P --apply` (void, credit note, replacement), never silently by a run.

Every step runs under the invoicing lease (billing/invoice_lock.py): one invoice run, issue,
credit note or void at a time per database, whichever process starts it. Holding it, a run
first deletes the lines no header names (of any period, so that they count neither as credit
spent nor as billed), and checks that it still holds the lease (the fence) just before each
header. So numbers are never issued twice, a tenant has one standing invoice per period, and
numbering has no gaps: a number is only taken by a header, and a crashed run's is re-used.
Every change of state is journaled (billing/journal.py).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
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
from billing import books
from billing import invoice_store as store
from billing.accounts import CreditPool, allocation_id, date_in
from billing.concessions import concessions_of, period_notes
from billing.credit_notes import delete_stray_credit_note_lines
from billing.errors import BillingError
from billing.invoice_lock import invoicing_lease
from billing.invoice_store import CURRENCY, delete_stray_lines  # noqa: F401  (re-exported for callers and tests)
from billing.journal import actor_here, entry
from billing.tenants import find_tenant, list_tenants, registered_tenants, trial_tenants
from schemas.books import (
    BillingRunCompleted, BillingRunRow, InvoiceFact, InvoiceTermsRow, ReratePublished, RerateRunRow,
)
from schemas.ids import is_id
from usage.by_tenant import plain, usage_by_tenant
from usage.corrections import stored_corrections
from usage.failpoints import pause_at
from usage.queries import tenants_with_charges_sql
from usage.rated import coverage, rated_source, source_of
from usage.regenerate import RegenerateRefused, regenerate
from usage.rollup import roll_up

CHARGE_KINDS = ("rent", "discount", "electricity")


class NothingToIssue(BillingError):
    """`invoice issue` found no draft to issue for the period (and tenant)."""


@dataclass
class RunReport:
    period: str
    created: list[str] = field(default_factory=list)   # invoice numbers issued by this run
    existing: list[str] = field(default_factory=list)  # invoices that were already issued
    unregistered: list[str] = field(default_factory=list)  # tenants invoiced (without trial credit) but not registered
    drafted: list[str] = field(default_factory=list)  # draft ids made by this run (review = "manual")
    refreshed: list[str] = field(default_factory=list)  # drafts whose figures this run changed
    unchanged: list[str] = field(default_factory=list)  # drafts that stayed as they were


def _line_key(line: InvoiceLine) -> tuple:
    """What makes two lines about the same charge: grouping fields and unit price."""
    pue = str(plain(line.pue)) if line.pue is not None else ""
    return (line.gpu_model or "", line.plan or "", line.site or "", line.band or "", pue, str(plain(line.unit_price)))


_LATE_SQL = """
SELECT DISTINCT i.tenant, i.period
FROM (SELECT tenant, period, issued_at FROM invoices FINAL WHERE period < {p:String} AND status = 'issued') AS i
INNER JOIN (SELECT period, max(written_at) AS written_at FROM rated_writes WHERE period < {p:String} GROUP BY period) AS w
    ON i.period = w.period
WHERE w.written_at > i.issued_at - INTERVAL 1 HOUR  -- margin for clock skew between hosts: a
                                                    -- recompute that finds nothing new adds nothing
"""


def late_periods(db: Any, period: str) -> dict[str, list[str]]:
    """Tenant → their issued periods before `period` that received rated data after the invoice.

    Only these can need adjustments: rated rows are only ever added or re-written (a late
    usage reading re-writes an energy row with the tenant), and every write stamps its hour
    in rated_writes with the database's clock. A written period is recomputed for each tenant
    invoiced in it; one whose figures did not change gets no adjustment.
    """
    late: dict[str, list[str]] = defaultdict(list)
    for tenant, ref in db.query(_LATE_SQL, {"p": period}):
        late[tenant].append(ref)
    return {tenant: sorted(refs) for tenant, refs in late.items()}


def pending_adjustments(db: Any, rules: Any, tenant: str, period: str, refs: list[str] | None = None, *,
                        excluding: str | None = None) -> list[Adjustment]:
    """Late data for the tenant's issued periods `refs` (default: all before `period`),
    as signed fen amounts; with `excluding`, as if that issued invoice (the one being re-rated)
    had not charged any of it.

    For each such period: recompute its rent, discount and electricity lines from the
    rated data as it is now, and compare each line's rounded amount and quantity with what
    was already invoiced for it (the issued invoice's line plus adjustments on other issued
    invoices that reference the period, which carry the same grouping fields and unit price).
    """
    earlier = refs if refs is not None else sorted({h.period for h in store.headers(db, tenant=tenant, status="issued")
                                                     if h.period < period})
    adjustments: list[Adjustment] = []
    for ref in earlier:
        rent, energy = usage_by_tenant(db, rated_source(db, rules, ref, tenant))
        now = build_invoice(tenant, ref, rent[tenant], energy[tenant], (), Decimal(0), Decimal(0))
        billed: dict[tuple, list] = defaultdict(lambda: [Decimal(0), Decimal(0), None])  # amount, quantity, line
        charged = [line for line in _issued_lines(db, tenant, period=ref, excluding=excluding)
                   if line.kind in CHARGE_KINDS]
        for line in [*charged, *_issued_lines(db, tenant, ref_period=ref, excluding=excluding)]:
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


def billed_elsewhere(db: Any, tenant: str, period: str) -> list[Adjustment]:
    """For a replacement of `tenant`'s voided invoice for `period`: the late usage of `period`
    that other issued invoices already charged as adjustments, taken off again (the replacement
    is built from the period's usage as it is now, which includes that usage)."""
    out = []
    for number, of_period, line in _issued_lines(db, tenant, ref_period=period, numbered=True):
        if of_period == period:  # an invoice of the period itself (none stands while it is replaced)
            continue
        out.append(Adjustment(
            ref_period=period, description=f"already charged on {number}: {line.description}"[:300],
            amount=-line.amount, gpu_model=line.gpu_model, plan=line.plan, site=line.site, band=line.band,
            pue=line.pue, quantity=-line.quantity, unit=line.unit, unit_price=line.unit_price))
    return out


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


@dataclass(frozen=True)
class _Standing:
    """What a tenant has for a period: its issued invoice, its draft, the voided one to replace."""

    issued: IssuedInvoice | None = None
    draft: IssuedInvoice | None = None
    voided: IssuedInvoice | None = None


def _standing(db: Any, period: str) -> dict[str, _Standing]:
    by_tenant: dict[str, dict[str, IssuedInvoice]] = defaultdict(dict)
    for header in store.headers(db, period=period):  # in issue order: the latest of a status wins
        by_tenant[header.tenant][header.status] = header
    return {t: _Standing(s.get("issued"), s.get("draft"), s.get("voided")) for t, s in by_tenant.items()}


RUN_BATCH = 100  # invoices an invoice run records on the books per transaction (GPUBILL_BOOKS_BATCH)


def run_period(db: Any, rules: Any, period: str, *, now: datetime | None = None,
               progress: Callable[[str], None] | None = None,
               on_wait: Callable[[str], None] | None = None, actor: str | None = None,
               tenants: list[str] | None = None, batch: int = RUN_BATCH) -> RunReport:
    """Invoice (or, under manual review, draft) every tenant (of `tenants`, when given) with
    charges or pending adjustments in `period`. Idempotent, and safe beside another run: it
    waits for the invoicing lease (saying so to `on_wait`). The invoices are recorded on the
    books `batch` at a time, each group all or none (billing/books.py `batched`)."""
    rules.period_bounds(period)  # validates the period string
    now = now or datetime.now(timezone.utc)
    roll_up(db, rules, period=period)  # not needed for exactness (reads are exact), only for speed
    with invoicing_lease(db, on_wait=on_wait) as fence:
        delete_stray_lines(db)
        delete_stray_credit_note_lines(db)
        if _apply_corrections(db, rules, period):
            fence()
        with books.batched(db, batch):
            return _invoice_period(db, rules, period, now, fence, progress, actor or actor_here(), tenants)


def _apply_corrections(db: Any, rules: Any, period: str) -> int:
    """A first run's step 0 (module docstring): the stored corrections touching `period` applied
    to its rated data, when none of its invoices is issued or voided yet. Returns the hours
    published anew (0: no correction touches it, an invoice stands, or they were applied before:
    a second regenerate changes nothing). BillingError, one line, where they cannot be applied."""
    lo, hi = rules.period_bounds(period)
    if not stored_corrections(db, lo, hi):
        return 0
    if any(s.issued is not None or s.voided is not None for s in _standing(db, period).values()):
        return 0
    try:
        switched = regenerate(db, rules, period)
        record_publication(db, period, switched.generation)
        return len(switched.hours)
    except RegenerateRefused as exc:
        raise BillingError(f"invoice run {period}: the stored corrections that touch it cannot be applied: "
                           f"{exc}") from None


_RERATE_RUN_SQL = (f"SELECT {', '.join(RerateRunRow.columns())} FROM rerate_runs FINAL "
                   "WHERE period = {p:String} AND generation = {g:UInt64}")


def record_publication(db: Any, period: str, generation: int | None) -> None:
    """Record on the books that `period`'s rated data was published anew as `generation` (its
    rerate_runs row, as usage/regenerate.py wrote it); nothing when nothing was published."""
    if not generation:
        return
    rows = db.query(_RERATE_RUN_SQL, {"p": period, "g": int(generation)})
    if rows:
        row = RerateRunRow(**dict(zip(RerateRunRow.columns(), rows[0], strict=True)))
        books.record(db, ReratePublished(kind="rerate_published", run=row))


def _invoice_period(db: Any, rules: Any, period: str, now: datetime, fence: Callable[[], None],
                    progress: Callable[[str], None] | None, actor: str, only: list[str] | None = None) -> RunReport:
    """run_period's work, holding the lease; `fence` is called before each header."""
    report = RunReport(period=period)
    standing = _standing(db, period)
    source = source_of(coverage(db, rules, period), rules)
    tenants = {row[0] for row in db.query(tenants_with_charges_sql(source[0]), source[1])}
    late = late_periods(db, period)
    trial, registered = trial_tenants(db), registered_tenants(db)  # as the registry is at this run
    tenants |= set(late) | {t for t, s in standing.items() if s.draft is not None}
    rent, energy = usage_by_tenant(db, source)
    manual = rules.review == "manual"
    numbers, parties = _Numbers(db), {t.tenant: t for t in list_tenants(db)}
    credit = CreditPool(db, rules)  # unapplied credit, spent on the invoices as they are issued (issue 38)
    for tenant in sorted(tenants if only is None else tenants & set(only)):
        has = standing.get(tenant, _Standing())
        if has.issued is not None:
            report.existing.append(has.issued.number)
            continue
        adjustments = pending_adjustments(db, rules, tenant, period, late.get(tenant, []))
        if has.voided is not None:
            adjustments += billed_elsewhere(db, tenant, period)
        if not rent.get(tenant) and not energy.get(tenant) and not adjustments and has.draft is None:
            continue
        draft = _draft(db, rules, tenant, period, rent.get(tenant, ()), energy.get(tenant, ()), adjustments,
                       new_tenant=tenant in trial, replacing=has.voided is not None)
        replaces = has.draft.replaces if has.draft is not None else (has.voided.number if has.voided else "")
        if manual:
            _keep_draft(db, draft, has.draft, replaces, now, fence, actor, report, rules.revision)
            continue
        number = _issue(db, rules, draft, has.draft, replaces, now, fence, actor, numbers=numbers.next,
                        registered=parties.get(tenant), credit=credit)
        report.created.append(number)
        if tenant not in registered:
            report.unregistered.append(tenant)
        if progress:
            progress(number)
    books.record(db, BillingRunCompleted(kind="billing_run_completed", run=BillingRunRow(
        period=period, completed_at=now, invoices=len(report.created) + len(report.existing) + len(report.drafted)
        + len(report.refreshed) + len(report.unchanged))))
    return report


def _keep_draft(db: Any, draft: InvoiceDraft, stored: IssuedInvoice | None, replaces: str, now: datetime,
                fence: Callable[[], None], actor: str, report: RunReport, rules_revision: str) -> None:
    """Write `draft` as a new draft, or as the next revision of `stored` when its figures changed."""
    if stored is not None and store.same_figures(draft, store.load(db, stored)):
        report.unchanged.append(stored.id)
        return
    doc_id = stored.id if stored is not None else store.new_draft_id()
    revision = stored.revision + 1 if stored is not None else 1
    action = "draft_refreshed" if stored is not None else "draft_made"
    fact = InvoiceFact(
        kind=action, lines=store.line_rows(doc_id, revision, draft),
        header=store.header_row(draft, doc_id=doc_id, status="draft", revision=revision, issued_at=now,
                                replaces=replaces, rules_revision=rules_revision),
        journal=(entry(action, invoice=doc_id, tenant=draft.tenant, period=draft.period, actor=actor, document=replaces,
                       detail=f"revision {revision}: total {draft.total} {CURRENCY}"),))
    _pause_before_header()
    fence()
    books.record(db, fact)
    (report.refreshed if stored is not None else report.drafted).append(doc_id)


class _Numbers:
    """The next gap-free numbers of a run that records its invoices in groups: read from the
    projection once per year, then counted on (the group not recorded yet is not in it)."""

    def __init__(self, db: Any) -> None:
        self.db, self.last = db, {}

    def next(self, year: int) -> tuple[str, int]:
        if year not in self.last:
            self.last[year] = store.next_number(self.db, year)[1] - 1
        self.last[year] += 1
        return f"GB-{year}-{self.last[year]:06d}", self.last[year]


_UNREAD = object()


def _issue(db: Any, rules: Any, draft: InvoiceDraft, stored: IssuedInvoice | None, replaces: str, now: datetime,
           fence: Callable[[], None], actor: str, *, numbers: Callable[[int], tuple[str, int]] | None = None,
           registered: Any = _UNREAD, credit: CreditPool | None = None) -> str:
    """Issue `draft`: number it and record the invoice as issued — its header, its lines (unless
    they are `stored`'s current revision unchanged), its journal, its seller and buyer as they
    are now, its issue and due dates, and the tenant's unapplied credit spent on it (`credit`, read
    when not given) — as one fact on the books. Returns the number. Needs the lease, the numbered
    series' writer (billing/books.py) and no stray lines."""
    year = int(draft.period[:4])
    number, seq = numbers(year) if numbers is not None else store.next_number(db, year)
    lines: tuple = ()
    if stored is not None and store.same_figures(draft, store.load(db, stored)):
        doc_id, revision, refreshed = stored.id, stored.revision, False
    else:
        doc_id = stored.id if stored is not None else number
        revision = stored.revision + 1 if stored is not None else 1
        refreshed = stored is not None
        lines = store.line_rows(doc_id, revision, draft, number="" if refreshed else number)
    journal = []
    if refreshed:
        journal.append(entry("draft_refreshed", invoice=doc_id, tenant=draft.tenant, period=draft.period, actor=actor,
                             detail=f"revision {revision} at issue: total {draft.total} {CURRENCY}"))
    journal.append(entry("issued", invoice=number, document=doc_id if doc_id != number else "", tenant=draft.tenant,
                         period=draft.period, actor=actor, detail=f"total {draft.total} {CURRENCY}"))
    if replaces:
        journal.append(entry("replaced", invoice=replaces, document=number, tenant=draft.tenant, period=draft.period,
                             actor=actor, detail=f"replaced by {number}"))
    if registered is _UNREAD:
        registered = find_tenant(db, draft.tenant) if is_id(draft.tenant) else None
    issued_on = date_in(rules, now)
    fact = InvoiceFact(
        kind="invoice_issued", lines=lines, journal=tuple(journal),
        header=store.header_row(draft, doc_id=doc_id, status="issued", revision=revision, issued_at=now,
                                number=number, seq=seq, replaces=replaces, rules_revision=rules.revision),
        seller=store.seller_party(rules.seller), buyer=store.buyer_party(draft.tenant, registered),
        terms=InvoiceTermsRow(number=number, tenant=draft.tenant, issued_on=issued_on,
                              due_on=issued_on + timedelta(days=rules.payment_terms_days)),
        allocations=tuple((credit or CreditPool(db, rules, draft.tenant)).spend(
            draft.tenant, number, issued_on, draft.total, reason="credit", fact_id=allocation_id(),
            recorded_at=now.astimezone(timezone.utc))) if draft.total > 0 else ())
    _pause_before_header()
    fence()
    books.record(db, fact)
    return number


def issue_period(db: Any, rules: Any, period: str, *, tenant: str | None = None, now: datetime | None = None,
                 on_wait: Callable[[str], None] | None = None, actor: str | None = None) -> list[tuple[str, str]]:
    """Issue the drafts of `period` (of `tenant` only, when given), a replacement too: each is
    re-built first from the data as it is now (late data, credits another invoice has spent
    since), so what is issued is what a run would issue. Returns (draft id, number) of each;
    NothingToIssue when there is no draft."""
    rules.period_bounds(period)
    now = now or datetime.now(timezone.utc)
    actor = actor or actor_here()
    with invoicing_lease(db, on_wait=on_wait) as fence:
        delete_stray_lines(db)
        delete_stray_credit_note_lines(db)
        if _apply_corrections(db, rules, period):  # stored since the drafts were made, none issued yet
            fence()
        standing = _standing(db, period)
        drafts = sorted((t, s) for t, s in standing.items()
                        if s.draft is not None and s.issued is None and (tenant is None or t == tenant))
        if not drafts:
            whose = f" of tenant {tenant}" if tenant is not None else ""
            raise NothingToIssue(f"no drafts{whose} to issue for {period}; `gpubill invoice drafts --period {period}` "
                                 "lists them, `gpubill invoice run` makes them")
        trial = trial_tenants(db)
        credit = CreditPool(db, rules)
        issued = []
        for who, has in drafts:
            draft = draft_invoice(db, rules, who, period, new_tenant=who in trial, replacing=has.voided is not None)
            issued.append((has.draft.id, _issue(db, rules, draft, has.draft, has.draft.replaces, now, fence, actor,
                                                credit=credit)))
        return issued


def _draft(db: Any, rules: Any, tenant: str, period: str, rent: Any, energy: Any, adjustments: list[Adjustment],
           *, new_tenant: bool, replacing: bool = False) -> InvoiceDraft:
    """The tenant's invoice for `period` from its usage and adjustments: credits still
    available (the trial credit when `new_tenant`), discounts and VAT as the rules say; when
    `replacing` voided invoices, the concessions their goodwill notes carry (billing/concessions.py:
    UnknownCreditNote for a note of a reason not known)."""
    credits = invoice_credits(db, rules, tenant, period, new_tenant=new_tenant)
    carried = concessions_of(period_notes(db, tenant, period)) if replacing else ()
    return build_invoice(tenant, period, rent, energy, adjustments, credits, rules.vat_rate(period), carried)


def invoice_credits(db: Any, rules: Any, tenant: str, period: str, *, new_tenant: bool) -> list[CreditBalance]:
    """What is left of the tenant's credit grants for `period` (the trial credit when
    `new_tenant`): the credits its invoice would spend, soonest-expiring first. Credit spent
    by the tenant's issued invoices of every other period counts (not by drafts or voided ones)."""
    grants = rules.credit_grants(tenant, new_tenant=new_tenant)
    if not grants:  # nothing to spend: no need to read what was spent
        return []
    return credit_balances(grants, credit_spent(db, tenant, period, other_periods=True), period)


def draft_invoice(db: Any, rules: Any, tenant: str, period: str, *, source: tuple[str, dict] | None = None,
                  new_tenant: bool | None = None, replacing: bool | None = None) -> InvoiceDraft:
    """The invoice `run_period` would build for `tenant` and `period` if it ran now — same
    usage source, late-data adjustments, credits, discounts and VAT — writing nothing (no
    rollup, no lease, no number). For month-to-date estimates (billing/current_usage.py);
    `source` is the tenant's `rated_source` when the caller already has it."""
    rent, energy = usage_by_tenant(db, source or rated_source(db, rules, period, tenant))
    adjustments = pending_adjustments(db, rules, tenant, period, late_periods(db, period).get(tenant, []))
    if replacing is None:
        replacing = bool(store.headers(db, tenant=tenant, period=period, status="voided"))
    if replacing:
        adjustments += billed_elsewhere(db, tenant, period)
    return _draft(db, rules, tenant, period, rent.get(tenant, ()), energy.get(tenant, ()), adjustments,
                  new_tenant=tenant in trial_tenants(db) if new_tenant is None else new_tenant, replacing=replacing)


def credit_spent(db: Any, tenant: str, period: str, *, other_periods: bool = False) -> dict[str, Decimal]:
    """Grant id → credit the tenant's issued invoices before `period` spent of it (with
    `other_periods`: of every period but `period`, for an invoice issued out of order)."""
    rows = db.query(
        "SELECT l.credit_id, -sum(l.amount) FROM invoice_lines AS l FINAL "
        "INNER JOIN (SELECT id, revision FROM invoices FINAL WHERE tenant = {t:String} AND status = 'issued' AND "
        + ("period != {p:String}" if other_periods else "period < {p:String}") + ") AS h "
        "ON l.id = h.id AND l.revision = h.revision "
        "WHERE l.tenant = {t:String} AND l.kind = 'credit' GROUP BY l.credit_id",
        {"t": tenant, "p": period},
    )
    return {credit_id or "": Decimal(spent) for credit_id, spent in rows}


def _pause_before_header() -> None:
    """The failpoint `invoice-header` (usage/failpoints.py): between an invoice's lines and its header."""
    pause_at("invoice-header")


def _issued_lines(db: Any, tenant: str, *, period: str | None = None, ref_period: str | None = None,
                  numbered: bool = False, excluding: str | None = None) -> list:
    """Lines of `tenant`'s issued invoices: of the invoice for `period`, or the adjustments
    about `ref_period` on any of them (with `numbered`: as (number, invoice's period, line))."""
    where = "l.period = {p:String}" if period is not None else "l.kind = 'adjustment' AND l.ref_period = {r:String}"
    sql = (
        f"SELECT h.number, l.period, {', '.join('l.' + f for f in store.LINE_FIELDS)} FROM invoice_lines AS l FINAL "
        "INNER JOIN (SELECT id, revision, number FROM invoices FINAL WHERE tenant = {t:String} AND status = 'issued' "
        "AND number != {x:String}) AS h "
        f"ON l.id = h.id AND l.revision = h.revision WHERE l.tenant = {{t:String}} AND {where} "
        "ORDER BY h.number, l.line_no"
    )
    rows = db.query(sql, {"t": tenant, "p": period or "", "r": ref_period or "", "x": excluding or ""})
    if not numbered:
        return [store.line_of_row(row[2:]) for row in rows]
    return [(number, of_period, store.line_of_row(tuple(fields))) for number, of_period, *fields in rows]


def load_invoice(db: Any, tenant: str, period: str, *, drafts: bool = True) -> IssuedInvoice:
    """`tenant`'s invoice for `period` that stands — the issued one, else (with `drafts`) its
    draft, never a voided one; NotFound when there is none."""
    return store.current(db, tenant, period, drafts=drafts)


def list_invoices(db: Any, period: str) -> list[tuple[str, str, Decimal]]:
    """(number — or draft id — , tenant, total) of every invoice of a period that is not voided."""
    return [(h.number or h.id, h.tenant, h.total) for h in store.headers(db, period=period, status=("issued", "draft"))]
