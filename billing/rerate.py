"""Re-rating a period under the rules as they are now and every stored correction (issue 25, item 3).

    rerate_preview(db, rules, period, tenant=None) -> RerateReport     reads only (--dry-run)
    rerate_apply(db, rules, period, ...) -> RerateReport               switches the rated data, then the documents (--apply)

A price correction for the past is an edit of the rule files (a version with an earlier
`effective_from`); a wrong reading is corrected by an event on gpu.corrections.v1. What the
period's rated data becomes is usage/regenerate.py's (re-priced at the rollup grain where it
can, rated again from the per-second rows and raw readings where it must). The preview
builds each tenant's invoice from it as the replacement of its issued one would be built
(billing/invoicing.py: credits the tenant's other issued invoices left, late-data adjustments
for earlier periods, less what later invoices already charged for this one), then sets it
beside the invoice that stands, line by line.

`rerate_apply`, holding the invoicing lease (so an invoice run waits for it, and it for a run):

1. switch the period's rated data to the new generation (usage.regenerate.regenerate: one
   publish, readers see old or new);
2. for every issued invoice of the period whose figures differ from what it would be now:
   void it with a credit note of reason `rerate` (cancel and re-issue, as a red-letter
   reversal does). Its earlier credit notes: a `goodwill` one is a concession the replacement
   carries (a line naming the note, before tax), the others are superseded by the correction
   (billing_rules/concessions.py); the report names each and what becomes of it;
3. run the period (billing.invoicing: the voided invoices' replacements — drafts under manual
   review —, first invoices of tenants with new charges, drafts refreshed; unchanged
   invoices are left alone).

Each step reads what the last one left, so an apply killed at any point is finished by the
next: nothing is voided twice (a voided invoice is not issued), nothing issued twice (the
run issues only where no issued invoice stands). A second apply changes nothing. A credit
note of the period with a reason this gpubill does not know refuses the preview and the
apply before anything is written (billing.concessions.UnknownCreditNote).

What the tenant owes for the period is an invoice's total less its credit notes: the
report's `old_owed` and `new_owed` (a replacement has no notes yet), and their difference.

    RerateRefused(BillingError)   the period cannot be re-rated as asked; nothing was written
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Callable

from billing import invoice_store as store
from billing.concessions import NoteFate, check_reasons, concessions_of, fates
from billing.errors import BillingError
from billing.credit_notes import credit_notes, void_invoice
from billing.invoice_lock import invoicing_lease
from billing.invoicing import (
    billed_elsewhere, invoice_credits, late_periods, pending_adjustments, record_publication, run_period,
)
from billing.journal import actor_here
from billing.tenants import trial_tenants
from billing_rules import EnergyUsage, InvoiceDraft, InvoiceLine, RentUsage, build_invoice
from usage.by_tenant import usage_by_tenant
from usage.failpoints import pause_at
from usage.regenerate import RegenerateRefused, drop_terms, new_source, plan, regenerate

__all__ = ["LineChange", "RerateRefused", "RerateReport", "TenantChange", "rerate_apply", "rerate_preview"]

class RerateRefused(BillingError):
    """A re-rating that cannot be made as asked."""


@dataclass(frozen=True)
class LineChange:
    """One invoice line before and after: `old_*` None for a new line, `new_*` None for one that goes;
    `old` and `new` the lines themselves (what the documents name them by)."""

    kind: str
    description: str
    old_quantity: Decimal | None
    new_quantity: Decimal | None
    old_amount: Decimal | None
    new_amount: Decimal | None
    old: InvoiceLine | None = None
    new: InvoiceLine | None = None


@dataclass(frozen=True)
class TenantChange:
    tenant: str
    invoice: str  # the number of the invoice that stands ('' for none; a draft's id)
    status: str  # issued | draft | none
    old_total: Decimal
    new_total: Decimal  # the replacement's, when `replaced`; else the invoice as it would be now
    lines: tuple[LineChange, ...] = ()
    credited: Decimal = Decimal("0.00")  # with VAT: the credit notes on the issued invoice that stands
    replaced: bool = False  # the issued invoice's figures change: the apply voids and replaces it
    notes: tuple[NoteFate, ...] = ()  # every earlier credit note and what becomes of it

    @property
    def old_owed(self) -> Decimal:
        """What the tenant owes for the period now: the invoice that stands less its credit notes."""
        return self.old_total - self.credited

    @property
    def new_owed(self) -> Decimal:
        """What it would owe: the replacement's total (no note on it yet), else as now."""
        return self.new_total - (Decimal("0.00") if self.replaced else self.credited)

    @property
    def difference(self) -> Decimal:
        return self.new_owed - self.old_owed


@dataclass
class RerateReport:
    period: str
    rules_revision: str
    tenants: list[TenantChange] = field(default_factory=list)
    # --apply only: what it did
    generation: int = 0  # the rated data's new generation (0: it did not change)
    hours: int = 0  # hours published anew
    voided: list[tuple[str, str]] = field(default_factory=list)  # (invoice, credit note)
    issued: list[str] = field(default_factory=list)  # replacements and first invoices issued
    drafted: list[str] = field(default_factory=list)  # drafts made or refreshed (manual review)


def _plan(db: Any, rules: Any, period: str):
    try:
        return plan(db, rules, period)
    except RegenerateRefused as exc:
        raise RerateRefused(str(exc)) from None


def rerate_apply(db: Any, rules: Any, period: str, *, tenant: str | None = None, actor: str | None = None,
                 now: datetime | None = None, on_wait: Callable[[str], None] | None = None,
                 progress: Callable[[str], None] | None = None) -> RerateReport:
    """Re-rate `period` and correct its documents (module docstring, steps 1 to 3). `tenant`
    limits the documents corrected; the rated data is switched for the whole period."""
    rules.period_bounds(period)
    actor = actor or actor_here()
    now = now or datetime.now(timezone.utc)
    say = progress or (lambda _msg: None)
    check_reasons(credit_notes(db, period=period, tenant=tenant))  # before anything is written
    with invoicing_lease(db, on_wait=on_wait) as fence:
        try:
            switched = regenerate(db, rules, period, progress=say)
        except RegenerateRefused as exc:
            raise RerateRefused(str(exc)) from None
        fence()
        record_publication(db, period, switched.generation)
        report = rerate_preview(db, rules, period, tenant)
        report.generation, report.hours = switched.generation, len(switched.hours)
    for change in report.tenants:
        if change.status == "issued" and change.replaced:
            say(f"voiding {change.invoice} ({change.old_total} → {change.new_total})")
            _, note = void_invoice(db, rules, change.invoice, f"re-rated under rules {rules.revision}", actor=actor,
                                   now=now, on_wait=on_wait, credit_reason="rerate")
            report.voided.append((change.invoice, note.number if note else ""))
    pause_at("rerate-documents")  # usage/failpoints.py: between the voids and the replacements
    run = run_period(db, rules, period, now=now, on_wait=on_wait, actor=actor, tenants=[tenant] if tenant else None)
    report.issued, report.drafted = run.created, run.drafted + run.refreshed
    return report


def _changed(old: InvoiceDraft, now: InvoiceDraft) -> bool:
    """Whether an issued invoice asks other money than it would now (with the concessions it
    carries already): its total, or what it charges before credits and concessions. Lines alone
    are not compared: late data another invoice already charged shows in a replacement as more
    usage and a negative adjustment of the same sum (billed_elsewhere), which is the same bill."""
    def charged(invoice: InvoiceDraft) -> Decimal:
        return sum((ln.amount for ln in invoice.lines if ln.kind not in ("credit", "concession")), Decimal(0))

    return old.total != now.total or charged(old) != charged(now)


def rerate_preview(db: Any, rules: Any, period: str, tenant: str | None = None) -> RerateReport:
    """What re-rating `period` (one `tenant`, or every tenant with rated usage) under `rules`
    would change, invoice by invoice and line by line. Writes nothing."""
    rules.period_bounds(period)
    p = _plan(db, rules, period)
    try:
        source = new_source(db, rules, p)
        if tenant is not None:
            source = (f"(SELECT * FROM {source[0]} WHERE tenant = {{only:String}})", {**source[1], "only": tenant})
        rent, energy = usage_by_tenant(db, source)
    finally:
        drop_terms(db, p.run)
    trial = trial_tenants(db)
    report = RerateReport(period, rules.revision)
    standing = {h.tenant: h for h in store.headers(db, period=period, tenant=tenant, status=("issued", "draft"))}
    notes: dict[str, list] = defaultdict(list)
    every = credit_notes(db, period=period, tenant=tenant)
    check_reasons(every)
    for note in every:
        notes[note.tenant].append(note)
    late = late_periods(db, period)
    for who in sorted(set(rent) | set(energy) | set(standing)):
        old = store.load(db, standing[who]) if who in standing else None
        issued = old.number if old is not None and old.status == "issued" else ""
        adjustments = pending_adjustments(db, rules, who, period, late.get(who, []), excluding=issued or None)
        if issued:
            adjustments += billed_elsewhere(db, who, period)
        credits = invoice_credits(db, rules, who, period, new_tenant=who in trial)
        inputs = (who, period, rent.get(who, ()), energy.get(who, ()), adjustments, credits, rules.vat_rate(period))
        # the invoice as it would be now with the concessions it already carries; if that changes
        # it, its replacement, which also carries the goodwill notes on the invoice itself
        new = build_invoice(*inputs, concessions_of(notes[who], standing=issued))
        replaced = bool(issued) and _changed(old, new)
        if replaced:
            new = build_invoice(*inputs, concessions_of(notes[who]))
        credited = sum((n.total for n in notes[who] if issued and n.invoice == issued), Decimal("0.00"))
        report.tenants.append(TenantChange(
            tenant=who, invoice=(old.number or old.id) if old is not None else "",
            status=old.status if old is not None else "none",
            old_total=old.total if old is not None else Decimal("0.00"), new_total=new.total,
            lines=tuple(_line_changes(old.lines if old is not None else (), new)), credited=credited,
            replaced=replaced, notes=tuple(fates(notes[who], issued, new, replaced))))
    return report


def _line_changes(old_lines: tuple[InvoiceLine, ...], new: InvoiceDraft) -> list[LineChange]:
    """Old and new lines side by side, one entry per line: matched by what they charge for (kind,
    grouping fields, reference period, credit or note), at the same unit price first, then at
    another (a changed price is one line, old → new); a line that stays the same is listed too."""
    def what(line: InvoiceLine) -> tuple:
        return (line.kind, line.gpu_model, line.plan, line.site, line.band, line.pue, line.ref_period, line.credit_id,
                line.description if line.kind == "adjustment" else None)

    def priced(line: InvoiceLine) -> tuple:
        return (*what(line), line.unit_price if line.kind in ("rent", "electricity", "discount") else None)

    left = list(old_lines)
    pairs: dict[int, InvoiceLine] = {}
    for key in (priced, what):
        for i, line in enumerate(new.lines):
            if i in pairs:
                continue
            match = next((old for old in left if key(old) == key(line)), None)
            if match is not None:
                pairs[i] = match
                left.remove(match)
    out = []
    for i, line in enumerate(new.lines):
        matched = pairs.get(i)
        out.append(LineChange(line.kind, line.description, matched.quantity if matched else None, line.quantity,
                              matched.amount if matched else None, line.amount, matched, line))
    for line in left:
        out.append(LineChange(line.kind, line.description, line.quantity, None, line.amount, None, line, None))
    return out
