"""`gpubill rerate --period P (--dry-run | --apply)`: re-rating a period under the current rules and
every stored correction (billing/rerate.py). The dry run shows what would change, invoice by
invoice and line by line, exact to the fen, and changes nothing; --apply switches the rated data
and corrects the documents (void with a credit note, replacement), idempotently.

Each invoice line is one line, old → new, named in the invoice's own words (the PDF's:
reports.render.invoice.line_words), with its list price where it has one; then every earlier
credit note of the tenant's period and what becomes of it (billing/concessions.py)."""

from __future__ import annotations

import sys
from decimal import Decimal
from types import SimpleNamespace
from typing import Optional

import typer

from gpubill.cli.books import open_books
from gpubill.cli.common import (
    OFFLINE_HELP, check_period, connect, err, out, read_rules, take_corrections_to_end, terminal_text,
)
from gpubill.config import load_settings
from gpubill.errors import GpubillError


def _money(value) -> str | None:
    return None if value is None else f"{value:.2f}"


def _quantity(value) -> str | None:
    return None if value is None else f"{value:.6f}"


def _namer(rules, period: str, change):
    """A function naming each of `change`'s lines as the invoice's PDF does (English), with its price."""
    from reports.invoice_document import names_of
    from reports.invoice_model import InvoiceDocument
    from reports.render.invoice import line_to_dict, line_words

    lo, hi = rules.period_bounds(period)
    hours = Decimal(hi - lo) / 3600
    every = [x for ln in change.lines for x in (ln.old, ln.new) if x is not None]
    doc = InvoiceDocument(invoice=SimpleNamespace(tenant=change.tenant, lines=every),  # type: ignore[arg-type]
                          names=names_of(rules, SimpleNamespace(tenant=change.tenant, lines=every)))

    def name(ln) -> str:
        shown = [line_to_dict(x, hours) for x in (ln.old, ln.new) if x is not None]
        text = line_words("en", doc, shown[-1])
        prices = list(dict.fromkeys(d["list_price"] for d in shown if "list_price" in d))
        if prices:
            text += f" at {' → '.join(prices)} CNY/{shown[-1]['list_price_unit']}"
        return text

    return name


def rerate(
    period: str = typer.Option(..., help="Billing period YYYY-MM to re-rate."),
    tenant: Optional[str] = typer.Option(None, help="Only this tenant."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Change nothing: print the differences."),
    apply: bool = typer.Option(False, "--apply", help=(
        "Switch the period's rated data to the re-rated generation, void every issued invoice whose figures change "
        "with a credit note (reason rerate) and issue its replacement (a draft under manual review); a second "
        "--apply changes nothing.")),
    as_json: bool = typer.Option(False, "--json", help="One JSON object: period, rules_revision, tenants."),
    offline: bool = typer.Option(False, "--offline", help=OFFLINE_HELP + " With --dry-run only."),
) -> None:
    """Re-rate a period under the current rules and every correction: per tenant and invoice line, old → new."""
    from billing.rerate import rerate_apply, rerate_preview

    if dry_run == apply:
        raise GpubillError("say --dry-run (show what would change) or --apply (change it), one of the two")
    if offline and apply:
        raise GpubillError("--offline is for --dry-run: an --apply issues documents, so it takes every correction "
                           "on the log first")
    settings = load_settings()
    rules = read_rules(settings)
    period = check_period(period)
    with connect(settings) as database:
        # every correction on the log, stored before the plan: a worker need not run (issue 36)
        take_corrections_to_end(database, settings, f"rerate {period}", offline=offline if not apply else None)
        if apply:
            with open_books(database, settings, numbered=True, rules=rules):
                report = rerate_apply(database, rules, period, tenant=tenant,
                                      on_wait=lambda msg: err.print(f"[dim]{terminal_text(msg)}[/dim]"),
                                      progress=lambda msg: err.print(f"[dim]{terminal_text(msg)}[/dim]"))
        else:
            report = rerate_preview(database, rules, period, tenant)
    namers = {t.tenant: _namer(rules, period, t) for t in report.tenants}
    if as_json:
        import orjson

        applied = {"applied": {"generation": report.generation, "hours": report.hours,
                               "voided": [{"invoice": i, "credit_note": c} for i, c in report.voided],
                               "issued": report.issued, "drafted": report.drafted}} if apply else {}
        sys.stdout.write(orjson.dumps({
            "period": report.period, "rules_revision": report.rules_revision, **applied,
            "tenants": [{"tenant": t.tenant, "invoice": t.invoice, "status": t.status,
                         "old_total": _money(t.old_total), "new_total": _money(t.new_total),
                         "old_owed": _money(t.old_owed), "new_owed": _money(t.new_owed),
                         "difference": _money(t.difference), "replaced": t.replaced,
                         "lines": [{"kind": ln.kind, "description": namers[t.tenant](ln),
                                    "old_quantity": _quantity(ln.old_quantity), "new_quantity": _quantity(ln.new_quantity),
                                    "old_amount": _money(ln.old_amount), "new_amount": _money(ln.new_amount)}
                                   for ln in t.lines],
                         "credit_notes": [{"number": f.number, "invoice": f.invoice, "reason": f.reason,
                                           "total": _money(f.total), "fate": f.fate, "carried": _money(f.carried),
                                           "unused": _money(f.unused)} for f in t.notes]}
                        for t in report.tenants],
        }).decode() + "\n")
        return
    mode = "applied" if apply else "a dry run: nothing changed"
    out.print(f"{report.period} under rules {report.rules_revision} ({mode})", highlight=False)
    for t in report.tenants:
        invoice = terminal_text(t.invoice or "no invoice yet")
        owed = f", owed {t.old_owed:.2f} → {t.new_owed:.2f}" if t.credited else ""  # less its credit notes
        out.print(f"  {terminal_text(t.tenant)}  {invoice}  {t.old_total:.2f} → {t.new_total:.2f} CNY with VAT"
                  f"{owed} ({t.difference:+.2f})", highlight=False)
        for ln in t.lines:
            if ln.old_amount == ln.new_amount and ln.old_quantity == ln.new_quantity:
                continue
            out.print(f"      {terminal_text(namers[t.tenant](ln))}: {_money(ln.old_amount) or '-'} → "
                      f"{_money(ln.new_amount) or '-'}", highlight=False)
        for fate in t.notes:
            out.print(f"      {terminal_text(fate.text())}", highlight=False)
    if apply:
        out.print(f"rated data: {report.hours} hours published anew" + (f" (generation {report.generation})"
                                                                          if report.generation else ""), highlight=False)
        for invoice, note in report.voided:
            out.print(f"voided {terminal_text(invoice)} with credit note {terminal_text(note or '-')}", highlight=False)
        for number in report.issued:
            out.print(f"issued {terminal_text(number)}", highlight=False)
        for draft in report.drafted:
            out.print(f"draft {terminal_text(draft)} waits for review (gpubill invoice issue)", highlight=False)
        if not (report.voided or report.issued or report.drafted):
            out.print("no document changed", highlight=False)
