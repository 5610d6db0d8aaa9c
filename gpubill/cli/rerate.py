"""`gpubill rerate --period P --dry-run`: what re-rating a period under the current rules would
change, invoice by invoice and line by line, exact to the fen (billing/rerate.py). Reads only."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from gpubill.cli.common import check_period, connect, out, read_rules, terminal_text
from gpubill.config import load_settings
from gpubill.errors import GpubillError


def _money(value) -> str | None:
    return None if value is None else f"{value:.2f}"


def _quantity(value) -> str | None:
    return None if value is None else f"{value:.6f}"


def rerate(
    period: str = typer.Option(..., help="Billing period YYYY-MM to re-rate."),
    tenant: Optional[str] = typer.Option(None, help="Only this tenant."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Change nothing: print the differences (the only mode yet)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object: period, rules_revision, tenants."),
) -> None:
    """Re-price a period's rated usage under the current rules and show, per tenant and invoice line, old → new."""
    from billing.rerate import rerate_preview

    if not dry_run:
        raise GpubillError("say --dry-run: applying a re-rating (void, credit note, replacement) is not built yet; "
                           "the dry run shows what it would change (see gpubill rerate --help)")
    settings = load_settings()
    rules = read_rules(settings)
    with connect(settings) as database:
        report = rerate_preview(database, rules, check_period(period), tenant)
    if as_json:
        import orjson

        sys.stdout.write(orjson.dumps({
            "period": report.period, "rules_revision": report.rules_revision,
            "tenants": [{"tenant": t.tenant, "invoice": t.invoice, "status": t.status,
                         "old_total": _money(t.old_total), "new_total": _money(t.new_total),
                         "difference": _money(t.difference),
                         "lines": [{"kind": ln.kind, "description": ln.description,
                                    "old_quantity": _quantity(ln.old_quantity), "new_quantity": _quantity(ln.new_quantity),
                                    "old_amount": _money(ln.old_amount), "new_amount": _money(ln.new_amount)}
                                   for ln in t.lines]} for t in report.tenants],
        }).decode() + "\n")
        return
    out.print(f"{report.period} under rules {report.rules_revision} (a dry run: nothing changed)", highlight=False)
    for t in report.tenants:
        invoice = terminal_text(t.invoice or "no invoice yet")
        out.print(f"  {terminal_text(t.tenant)}  {invoice}  {t.old_total:.2f} → {t.new_total:.2f} CNY with VAT "
                  f"({t.difference:+.2f})", highlight=False)
        for ln in t.lines:
            if ln.old_amount == ln.new_amount and ln.old_quantity == ln.new_quantity:
                continue
            out.print(f"      {terminal_text(ln.description)}: {_money(ln.old_amount) or '-'} → "
                      f"{_money(ln.new_amount) or '-'}", highlight=False)
