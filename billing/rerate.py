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
   reversal does);
3. run the period (billing.invoicing: the voided invoices' replacements — drafts under manual
   review —, first invoices of tenants with new charges, drafts refreshed; unchanged
   invoices are left alone).

Each step reads what the last one left, so an apply killed at any point is finished by the
next: nothing is voided twice (a voided invoice is not issued), nothing issued twice (the
run issues only where no issued invoice stands). A second apply changes nothing.

    RerateRefused(BillingError)   the period cannot be re-rated as asked; nothing was written
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Callable

from billing import invoice_store as store
from billing.errors import BillingError
from billing.credit_notes import void_invoice
from billing.invoice_lock import invoicing_lease
from billing.invoicing import billed_elsewhere, invoice_credits, late_periods, pending_adjustments, run_period
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
    """One invoice line before and after: `old_*` None for a new line, `new_*` None for one that goes."""

    kind: str
    description: str
    old_quantity: Decimal | None
    new_quantity: Decimal | None
    old_amount: Decimal | None
    new_amount: Decimal | None


@dataclass(frozen=True)
class TenantChange:
    tenant: str
    invoice: str  # the number of the invoice that stands ('' for none; a draft's id)
    status: str  # issued | draft | none
    old_total: Decimal
    new_total: Decimal
    lines: tuple[LineChange, ...] = ()

    @property
    def difference(self) -> Decimal:
        return self.new_total - self.old_total


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
    with invoicing_lease(db, on_wait=on_wait) as fence:
        try:
            switched = regenerate(db, rules, period, progress=say)
        except RegenerateRefused as exc:
            raise RerateRefused(str(exc)) from None
        fence()
        report = rerate_preview(db, rules, period, tenant)
        report.generation, report.hours = switched.generation, len(switched.hours)
    for change in report.tenants:
        if change.status == "issued" and _changed(change):
            say(f"voiding {change.invoice} ({change.old_total} → {change.new_total})")
            _, note = void_invoice(db, rules, change.invoice, f"re-rated under rules {rules.revision}", actor=actor,
                                   now=now, on_wait=on_wait, credit_reason="rerate")
            report.voided.append((change.invoice, note.number if note else ""))
    pause_at("rerate-documents")  # usage/failpoints.py: between the voids and the replacements
    run = run_period(db, rules, period, now=now, on_wait=on_wait, actor=actor, tenants=[tenant] if tenant else None)
    report.issued, report.drafted = run.created, run.drafted + run.refreshed
    return report


def _changed(change: TenantChange) -> bool:
    """Whether an issued invoice asks other money than it would now: its total, or what it
    charges before credits. Lines alone are not compared: late data another invoice already
    charged shows in a replacement as more usage and a negative adjustment of the same sum
    (billed_elsewhere), which is the same bill."""
    def charged(which: str) -> Decimal:
        return sum((getattr(ln, which) or Decimal(0) for ln in change.lines if ln.kind != "credit"), Decimal(0))

    return change.old_total != change.new_total or charged("old_amount") != charged("new_amount")


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
    late = late_periods(db, period)
    for who in sorted(set(rent) | set(energy) | set(standing)):
        old = standing.get(who)
        excluded = old.number if old is not None and old.status == "issued" else None
        adjustments = pending_adjustments(db, rules, who, period, late.get(who, []), excluding=excluded)
        if old is not None and old.status == "issued":
            adjustments += billed_elsewhere(db, who, period)
        credits = invoice_credits(db, rules, who, period, new_tenant=who in trial)
        new = build_invoice(who, period, rent.get(who, ()), energy.get(who, ()), adjustments, credits,
                            rules.vat_rate(period))
        old_lines = store.load(db, old).lines if old is not None else ()
        report.tenants.append(TenantChange(
            tenant=who, invoice=(old.number or old.id) if old is not None else "",
            status=old.status if old is not None else "none",
            old_total=old.total if old is not None else Decimal("0.00"), new_total=new.total,
            lines=tuple(_line_changes(old_lines, new))))
    return report


def _line_changes(old_lines: tuple[InvoiceLine, ...], new: InvoiceDraft) -> list[LineChange]:
    """Old and new lines side by side, matched by kind and what they charge (grouping fields, unit
    price, reference period, credit); a line that stays the same is listed too."""
    def key(line: InvoiceLine) -> tuple:
        return (line.kind, line.gpu_model, line.plan, line.site, line.band, line.pue, line.ref_period, line.credit_id,
                line.unit_price if line.kind not in ("credit", "adjustment") else None,
                line.description if line.kind == "adjustment" else None)

    before: dict[tuple, list[InvoiceLine]] = defaultdict(list)
    for line in old_lines:
        before[key(line)].append(line)
    out = []
    for line in new.lines:
        matched = before[key(line)].pop(0) if before.get(key(line)) else None
        out.append(LineChange(line.kind, line.description, matched.quantity if matched else None, line.quantity,
                              matched.amount if matched else None, line.amount))
    for lines in before.values():
        for line in lines:
            out.append(LineChange(line.kind, line.description, line.quantity, None, line.amount, None))
    return out
