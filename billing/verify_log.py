"""The log proves the projections (issue 25, item 5): a period's charges per tenant from a replay
of the event log, set beside what the live database bills for the period now.

    log_charges(db, rules, period)     -> {tenant: Decimal}    on the scratch database the log was replayed into
    billed_charges(db, period)         -> {tenant: Billed}     on the live database
    compare(log, billed)               -> [TenantCheck]        every tenant of either side, by name
    documents(db, period)              -> [[str]]              the period's invoices, credit notes, allocations, write-offs
    documents_differ(books, live)      -> [str]                what the books (a projection of the log) and the
                                                               live database say otherwise about one document

The books are proved too (issue 37): the replay projects gpu.books.v1 into the scratch database,
and every invoice and credit note of the period there — its number, state, revision and total,
as the log records it — must be the live database's, and the charges it bills the log's.

Both sides are the period's *charges*: rent, electricity and discount lines, in fen, before
credits and before VAT. Why that basis:

- credits (the trial credit, contract grants) are spent across periods in the order invoices
  were issued; a scratch database has no other period's invoices, so what a credit covers
  there says nothing about the log;
- VAT is rounded once per invoice on its whole net, and late data for a period is charged
  on a later invoice together with that invoice's own usage: the VAT of a period is not a
  figure of its own. The lines are: each is rounded once, and late-data adjustments are
  built so that a period's line plus its adjustments equal the line as the data is now
  (billing/invoicing.py `pending_adjustments`), so the sums agree to the fen when the
  projections are right.

The live side, per tenant, is what the period is billed now:

    the rent, electricity and discount lines of its issued (not voided) invoice for the period
  + the adjustment lines referencing the period (ref_period) on any issued invoice — late data
    charged on later invoices, and what a replacement takes off again for them (`billed_elsewhere`)
  − the credit note lines against issued invoices that credit such a line

A voided invoice and its credit notes (the void's own and any before it) count for nothing:
the void cancels the invoice whole. Credit note lines that give back a credit are left out, as
credits are. A goodwill credit note on a standing invoice is a difference by design: the log
knows nothing of it, and verify-log lists it. Once its invoice is voided, the replacement
carries it as a `concession` line (billing_rules/concessions.py): like a credit, not a charge,
so it is left out and the replacement's charges agree with the log again.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from billing_rules import build_invoice
from usage.by_tenant import usage_by_tenant
from usage.queries import tenants_with_charges_sql
from usage.rated import coverage, source_of

__all__ = ["Billed", "TenantCheck", "billed_charges", "compare", "documents", "documents_differ", "log_charges"]

CHARGES = ("rent", "electricity", "discount")
ZERO = Decimal("0.00")

# A line that is the period's charge: one of its own invoice's charge lines, or an adjustment
# that references it (on whichever invoice carries it).
_OF_PERIOD = ("((l.period = {p:String} AND l.kind IN {charges:Array(String)}) "
              "OR (l.kind = 'adjustment' AND l.ref_period = {p:String}))")
_ISSUED = "(SELECT id, revision, number FROM invoices FINAL WHERE status = 'issued')"

_LINES_SQL = f"""
SELECT l.tenant, l.kind = 'adjustment' AND l.period != {{p:String}} AS elsewhere, sum(l.amount)
FROM invoice_lines AS l FINAL
INNER JOIN {_ISSUED} AS h ON l.id = h.id AND l.revision = h.revision
WHERE {_OF_PERIOD}
GROUP BY l.tenant, elsewhere
"""
# A credit note counts once its header is written (the commit point); its lines name the
# invoice line they credit, read here at the invoice's standing revision.
_CREDITED_SQL = f"""
SELECT l.tenant, sum(c.amount)
FROM (SELECT number, invoice, invoice_line_no, amount FROM credit_note_lines FINAL
      WHERE number IN (SELECT number FROM credit_notes FINAL)) AS c
INNER JOIN {_ISSUED} AS h ON c.invoice = h.number
INNER JOIN (SELECT id, revision, line_no, tenant, period, kind, ref_period FROM invoice_lines FINAL) AS l
    ON l.id = h.id AND l.revision = h.revision AND l.line_no = c.invoice_line_no
WHERE {_OF_PERIOD}
GROUP BY l.tenant
"""


@dataclass(frozen=True)
class Billed:
    """What the live database bills a tenant for a period, before credits and VAT, in its parts."""

    invoice: Decimal = ZERO  # the charge lines of its issued invoice for the period
    adjustments: Decimal = ZERO  # adjustments referencing the period on other issued invoices
    credited: Decimal = ZERO  # what credit notes against issued invoices took off those lines

    @property
    def total(self) -> Decimal:
        return self.invoice + self.adjustments - self.credited


@dataclass(frozen=True)
class TenantCheck:
    tenant: str
    log: Decimal  # the period's charges from the replayed log
    billed: Billed

    @property
    def difference(self) -> Decimal:
        """Billed less what the log proves: positive when the tenant is billed more."""
        return self.billed.total - self.log


def log_charges(db: Any, rules: Any, period: str) -> dict[str, Decimal]:
    """Each tenant's charges for `period` as its first invoice would carry them, before credits
    and VAT: the rent, electricity and discount lines `run_period` builds from the rated data
    (same source, same `build_invoice`), with no adjustments (nothing was invoiced before) and
    no credits. Meant for a scratch database holding a replay of the log."""
    source = source_of(coverage(db, rules, period), rules)
    tenants = [row[0] for row in db.query(tenants_with_charges_sql(source[0]), source[1])]
    rent, energy = usage_by_tenant(db, source)
    vat = rules.vat_rate(period)
    out = {}
    for tenant in tenants:
        draft = build_invoice(tenant, period, rent.get(tenant, ()), energy.get(tenant, ()), (), ZERO, vat)
        out[tenant] = sum((line.amount for line in draft.lines if line.kind in CHARGES), ZERO)
    return out


def billed_charges(db: Any, period: str) -> dict[str, Billed]:
    """Each tenant's charges for `period` as the live database bills them now (the module docstring)."""
    params = {"p": period, "charges": list(CHARGES)}
    parts: dict[str, dict[str, Decimal]] = {}
    for tenant, elsewhere, amount in db.query(_LINES_SQL, params):
        parts.setdefault(tenant, {})["adjustments" if elsewhere else "invoice"] = Decimal(amount)
    for tenant, amount in db.query(_CREDITED_SQL, params):
        parts.setdefault(tenant, {})["credited"] = Decimal(amount)
    return {tenant: Billed(**figures) for tenant, figures in parts.items()}


def compare(log: dict[str, Decimal], billed: dict[str, Billed]) -> list[TenantCheck]:
    """Every tenant of either side, by name; a tenant with nothing on either side is left out."""
    checks = [TenantCheck(t, log.get(t, ZERO), billed.get(t, Billed())) for t in sorted(set(log) | set(billed))]
    return [c for c in checks if c.log or c.billed.invoice or c.billed.adjustments or c.billed.credited]


_DOCUMENTS_SQL = """
SELECT 'invoice', id, number, status, toString(revision), toString(total) FROM invoices FINAL WHERE period = {p:String}
UNION ALL
SELECT 'credit note', number, invoice, reason, '', toString(total) FROM credit_notes FINAL WHERE period = {p:String}
UNION ALL
SELECT 'allocation', concat(invoice, ' from ', source), source_kind, '', '', toString(sum(amount)) FROM allocations FINAL
WHERE invoice IN (SELECT number FROM invoices FINAL WHERE period = {p:String} AND number != '')
GROUP BY invoice, source_kind, source
UNION ALL
SELECT 'write-off', invoice, '', '', '', toString(sum(amount)) FROM write_offs FINAL
WHERE invoice IN (SELECT number FROM invoices FINAL WHERE period = {p:String} AND number != '')
GROUP BY invoice
"""


def documents(db: Any, period: str) -> list[list[str]]:
    """The period's invoices (kind, id, number, status, revision, total), credit notes (kind,
    number, invoice, reason, '', total), what each source allocated to its invoices (kind, "invoice
    from source", source kind, '', '', amount) and their write-offs (kind, invoice, '', '', '', amount;
    issue 38), as text, sorted."""
    return sorted([list(map(str, row)) for row in db.query(_DOCUMENTS_SQL, {"p": period})])


def documents_differ(books: list[list[str]], live: list[list[str]]) -> list[str]:
    """One line per document the books and the live database state otherwise (or one of them lacks)."""
    on_books = {tuple(row[:2]): row for row in books}
    in_live = {tuple(row[:2]): row for row in live}
    out = []
    for key in sorted(set(on_books) | set(in_live)):
        a, b = on_books.get(key), in_live.get(key)
        if a != b:
            shown = lambda row: "missing" if row is None else " ".join(x for x in row[2:] if x)  # noqa: E731
            out.append(f"{key[0]} {key[1]}: on the books {shown(a)}, in the database {shown(b)}")
    return out
