"""`gpubill invoice run|show`: the monthly invoices (billing/invoicing.py does the work)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import typer

from gpubill.cli.common import check_format, check_period, connect, emit, err, out, read_rules, terminal_text
from gpubill.cli.report import check_choice
from gpubill.config import load_settings
from gpubill.errors import GpubillError
from reports.render.i18n import LANGS

app = typer.Typer(help="Monthly invoices.", no_args_is_help=True)
WARM_UP_FROM = 20  # Chinese PDFs: from this many on, making the font's common face once pays (reports/render/fonts.py)


@app.command("run")
def invoice_run(
    period: str = typer.Option(..., help="Billing period YYYY-MM (billing time zone)."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Also write each invoice as JSON, CSV and PDF here."),
    lang: str = typer.Option("en", "--lang", help="Language of the PDFs written with --out: en or zh-CN."),
) -> None:
    """Invoice every tenant with charges in the period (re-running changes nothing)."""
    from billing.invoicing import list_invoices, run_period
    from reports.invoice_files import write_invoice_files

    check_choice("--lang", lang, LANGS)
    settings = load_settings()
    rules = read_rules(settings)
    check_ended(rules, check_period(period))
    with connect(settings) as database:
        report = run_period(database, rules, check_period(period),
                            progress=lambda n: err.print(f"[dim]{terminal_text(n)}[/dim]"),
                            on_wait=lambda message: err.print(terminal_text(message), highlight=False))
        out.print(f"{period}: {len(report.created)} invoices created, {len(report.existing)} already final")
        if report.unregistered:
            err.print(f"{len(report.unregistered)} of them for tenants that are not registered (no trial credit); "
                      f"see `gpubill tenant unknown --period {period}`", highlight=False)
        listed = list_invoices(database, period)
        for number, tenant, total in listed:
            out.print(f"  {terminal_text(number)}  {terminal_text(tenant):<24} {total:>14} CNY", highlight=False)
        if out_dir:
            if lang != "en" and len(listed) >= WARM_UP_FROM:
                from reports.render.fonts import warm_up

                warm_up()  # seconds once, then each Chinese PDF costs a fraction of the full font's
            written = write_invoice_files(database, rules, period, out_dir, file_mode=settings.file_mode, lang=lang)
            err.print(f"wrote {len(written)} files to {terminal_text(out_dir)}", highlight=False)


@app.command("show")
def invoice_show(
    period: str = typer.Option(..., help="Billing period YYYY-MM."),
    tenant: str = typer.Option(..., help="Tenant id."),
    fmt: str = typer.Option("json", "--format", help="json, csv or pdf (pdf needs --out)."),
    out_file: Optional[Path] = typer.Option(None, "--out", help="Write to this file instead of stdout."),
    lang: str = typer.Option("en", "--lang", help="Language of the PDF: en or zh-CN (JSON and CSV are the same "
                             "in every language)."),
) -> None:
    """Print one invoice."""
    from billing.errors import NotFound
    from reports.invoice_document import invoice_document
    from reports.render import render_invoice

    check_format(fmt, "json", "csv", "pdf")
    check_choice("--lang", lang, LANGS)
    settings = load_settings()
    rules = read_rules(settings)
    one, period = tenant, check_period(period)  # any id: documents of ids outside the syntax are shown too
    with connect(settings) as database:
        try:
            document = invoice_document(database, rules, one, period)
        except NotFound:
            raise _no_invoice(database, one, period) from None
        data = render_invoice(document, fmt, lang=lang)
    emit(data, out_file, binary=fmt == "pdf")


def check_ended(rules, period: str, now: datetime | None = None) -> None:
    """A one-line refusal for a period that has not ended yet in the billing time zone: its
    invoices would miss the rest of the month (and a finalized invoice never changes)."""
    end_s = rules.period_bounds(period)[1]
    moment = now or datetime.now(timezone.utc)
    if end_s > moment.timestamp():
        ends = datetime.fromtimestamp(end_s, rules.billing_tz).strftime("%Y-%m-%d %H:%M")
        raise GpubillError(f"--period {period} has not ended: it ends at {ends} {rules.billing_tz} and is invoiced "
                           "after that (the scheduler runs it once its grace period has passed)")


def _no_invoice(db, tenant: str, period: str) -> Exception:
    """Why `tenant` has no invoice for `period`, in one line: an unknown tenant, or the periods it has."""
    from billing.tenants import invoiced_periods, is_known, unknown_tenant

    if not is_known(db, tenant):
        return unknown_tenant(tenant)
    periods = invoiced_periods(db, tenant)
    has = f"its invoices are for {', '.join(periods[-6:])}" if periods else "it has no invoice yet"
    return GpubillError(f"tenant {tenant} has no invoice for {period}; {has}")
