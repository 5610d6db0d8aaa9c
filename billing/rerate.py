"""Re-rating a period under the rules as they are now, previewed to the fen (issue 25, item 3, the dry run).

    rerate_preview(db, rules, period, tenant=None) -> RerateReport     reads only

A price correction for the past is an edit of the rule files (a version with an earlier
`effective_from`); the rated rows keep the prices they were rated at. The preview re-prices
the period's rated quantities with the current rules and builds each tenant's invoice as the
replacement of its issued one would be built (billing/invoicing.py: credits the tenant's other
issued invoices left, late-data adjustments for earlier periods, less what later invoices
already charged for this one), then sets it beside the invoice that stands, line by line.

How quantities are re-priced, without the per-second rows where it can:

1. Read the period's rated data at the rollup grain (usage/rated.py: an hour of a card, with
   the price terms it was rated at): rented seconds and allocated IT energy.
2. For each such hour, ask the rules for the rent (tenant, model) and electricity (site)
   rates in force over it (`RuleSet.rent_segments`, `energy_segments`). One rate over the
   whole hour — a price that changed at a day or hour edge, the usual case — prices the
   hour's quantity at once.
3. An hour in which a rate changes is counted again from its per-second rows, one count per
   piece of constant rate. Where retention dropped them (the period's verified archive holds
   them), the preview refuses in one line: re-rating from the archive is not built yet.

Not applied yet (issue 25 continues): the corrections on gpu.corrections.v1 (reattribute,
void_readings) — a preview re-prices the usage as rated — and `--apply`.

    RerateRefused(BillingError)   the period cannot be previewed as asked; nothing was read past the refusal
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from billing import invoice_store as store
from billing.errors import BillingError
from billing.invoicing import billed_elsewhere, invoice_credits, late_periods, pending_adjustments
from billing.tenants import trial_tenants
from billing_rules import EnergyUsage, InvoiceDraft, InvoiceLine, RentUsage, build_invoice
from usage.by_tenant import plain
from usage.rated import rated_source, retained_periods

__all__ = ["LineChange", "RerateRefused", "RerateReport", "TenantChange", "rerate_preview"]

_HOURS_SQL = """
SELECT tenant, toUnixTimestamp(hour) AS h, stream, gpu_uuid, gpu_model, site, rent_price, rent_per_s, discount_pct,
       band, tariff_per_kwh, pue, sum(seconds), sum(energy_mj)
FROM {source}
WHERE tenant != ''
GROUP BY tenant, h, stream, gpu_uuid, gpu_model, site, rent_price, rent_per_s, discount_pct, band, tariff_per_kwh, pue
ORDER BY tenant, h, stream, gpu_uuid
"""
_PIECES_SQL = """
SELECT {counts}
FROM rated_seconds FINAL
WHERE period = {{period:String}} AND tenant = {{tenant:String}} AND gpu_uuid = {{gpu:String}} AND stream = {{stream:String}}
  AND second >= toDateTime({{lo:UInt32}}, 'UTC') AND second < toDateTime({{hi:UInt32}}, 'UTC')
  AND rent_price = {{price:Decimal(18, 6)}} AND tariff_per_kwh = {{tariff:Decimal(18, 6)}}
"""


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


def rerate_preview(db: Any, rules: Any, period: str, tenant: str | None = None) -> RerateReport:
    """What re-rating `period` (one `tenant`, or every tenant with rated usage) under `rules`
    would change, invoice by invoice and line by line. Writes nothing."""
    rules.period_bounds(period)
    rent, energy = _repriced(db, rules, period, tenant)
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


def _repriced(db: Any, rules: Any, period: str, tenant: str | None) -> tuple[dict[str, list[RentUsage]],
                                                                              dict[str, list[EnergyUsage]]]:
    """The period's rated quantities priced by `rules` (steps 1 to 3 of the module docstring)."""
    source, params = rated_source(db, rules, period, tenant)
    rent: dict[str, list[RentUsage]] = defaultdict(list)
    energy: dict[str, list[EnergyUsage]] = defaultdict(list)
    retained = period in retained_periods(db)
    for (who, hour, stream, gpu, model, site, price, _per_s, _discount, _band, tariff, _pue, seconds,
         mj) in db.query(_HOURS_SQL.format(source=source), params):
        hour = int(hour)
        if stream == "rent":
            pieces = rules.rent_segments(who, model, hour, hour + 3600)
            counts = [int(seconds)] if len(pieces) == 1 else _counts(db, period, who, gpu, "rent", pieces, price,
                                                                    tariff, retained)
            for (_, _, rate), count in zip(pieces, counts):
                if count:
                    rent[who].append(RentUsage(gpu_model=model, plan=rate.plan, price=plain(rate.list_price),
                                               per_s=rate.per_s, seconds=count, discount_pct=plain(rate.discount_pct)))
        else:
            pieces = rules.energy_segments(site, hour, hour + 3600)
            sums = [int(mj)] if len(pieces) == 1 else _counts(db, period, who, gpu, "energy", pieces, price, tariff,
                                                             retained)
            for (_, _, rate), total in zip(pieces, sums):
                if total:
                    energy[who].append(EnergyUsage(site=site, band=rate.band, tariff_per_kwh=plain(rate.tariff_per_kwh),
                                                   pue=plain(rate.pue), energy_mj=total))
    return rent, energy


def _counts(db: Any, period: str, tenant: str, gpu: str, stream: str, pieces: list, price: Decimal, tariff: Decimal,
            retained: bool) -> list[int]:
    """Rented seconds (rent) or IT energy in mJ (energy) of the hour's per-second rows of one card
    that were rated at `price`/`tariff`, within each piece of constant rate."""
    if retained:
        raise RerateRefused(f"a rate changes inside an hour of {period} whose per-second rows retention dropped "
                            f"(card {gpu}); re-rating from the period's verified archive is not built yet")
    lo, hi = pieces[0][0], pieces[-1][1]
    inside = "second >= toDateTime({start}, 'UTC') AND second < toDateTime({end}, 'UTC')"
    of = (lambda where: f"countIf({where})") if stream == "rent" else (
        lambda where: f"sumIf(rated_seconds.energy_mj, {where})")
    counts = ", ".join(of(inside.format(start=int(start), end=int(end))) for start, end, _ in pieces)
    row = db.query(_PIECES_SQL.format(counts=counts), {"period": period, "tenant": tenant, "gpu": gpu,
                                                       "stream": stream, "lo": lo, "hi": hi, "price": price,
                                                       "tariff": tariff})[0]
    return [int(v) for v in row]


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
