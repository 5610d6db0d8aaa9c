"""`gpubill invoice run|drafts|issue|list|show|void|write-off|history`: the monthly invoices and their
lifecycle (billing/invoicing.py, billing/credit_notes.py, billing/payments.py and billing/journal.py do the work)."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Optional

import typer

from gpubill.cli.books import open_books
from gpubill.cli.common import (
    OFFLINE_HELP, check_format, check_period, connect, count, emit, err, money, out, read_rules,
    take_corrections_to_end, terminal_text,
)
from gpubill.cli.report import check_choice
from gpubill.config import load_settings
from gpubill.errors import GpubillError
from reports.render.format import visible_text
from reports.render.i18n import LANGS

app = typer.Typer(help="Monthly invoices.", no_args_is_help=True)
WARM_UP_FROM = 20  # Chinese PDFs: from this many on, making the font's common face once pays (reports/render/fonts.py)


@app.command("run")
def invoice_run(
    period: str = typer.Option(..., help="Billing period YYYY-MM (billing time zone)."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Also write each invoice as JSON, CSV and PDF here."),
    lang: str = typer.Option("en", "--lang", help="Language of the PDFs written with --out: en or zh-CN."),
    offline: bool = typer.Option(False, "--offline", help=OFFLINE_HELP),
) -> None:
    """Invoice every tenant with charges in the period (re-running changes nothing)."""
    from billing.invoicing import list_invoices, run_period
    from reports.invoice_files import write_invoice_files

    check_choice("--lang", lang, LANGS)
    settings = load_settings()
    rules = read_rules(settings)
    check_ended(rules, check_period(period))
    with connect(settings) as database:
        # every correction on the log stored before the run, a worker running or not (issue 36)
        take_corrections_to_end(database, settings, f"invoice run {period}", offline=offline)
        with open_books(database, settings, numbered=True, rules=rules), _progress("issuing invoices") as progress:
            report = run_period(database, rules, check_period(period), progress=progress, batch=settings.books_batch,
                                on_wait=lambda message: err.print(terminal_text(message), highlight=False))
        out.print(run_summary(report, rules.review == "manual", period), highlight=False)
        if report.unregistered:
            err.print(f"{len(report.unregistered):,} of them for tenants that are not registered (no trial credit); "
                      f"see `gpubill tenant unknown --period {period}`", highlight=False)
        listed = list_invoices(database, period)
        out.print(invoices_table(listed), markup=False, highlight=False)
        if out_dir:
            if lang != "en" and len(listed) >= WARM_UP_FROM:
                from reports.render.fonts import warm_up

                warm_up()  # seconds once, then each Chinese PDF costs a fraction of the full font's
            written = write_invoice_files(database, rules, period, out_dir, file_mode=settings.file_mode, lang=lang)
            err.print(f"wrote {count(len(written), 'file')} to {terminal_text(out_dir)}", highlight=False)


def run_summary(report, manual: bool, period: str) -> str:
    """`invoice run`'s sentence: what it did to the period's invoices, in words with their plurals."""
    if manual:
        return (f"{period}: {count(len(report.drafted), 'draft')} made, {len(report.refreshed):,} refreshed, "
                f"{len(report.unchanged):,} unchanged, {len(report.existing):,} already issued (review = manual: "
                f"`gpubill invoice drafts --period {period}`, then `gpubill invoice issue --period {period}`)")
    return f"{period}: {count(len(report.created), 'invoice')} created, {len(report.existing):,} already final"


def invoices_table(listed) -> str:
    """The period's invoices, one a line — number (or draft id), tenant, total with VAT as money —
    and their sum; aligned, never cut."""
    if not listed:
        return "  no invoices for this period (no tenant had charges)"
    total = sum((amount for _number, _tenant, amount in listed), Decimal(0))
    rows = [("invoice", "tenant", "total, VAT incl.")]
    rows += [(visible_text(number), visible_text(tenant), money(amount)) for number, tenant, amount in listed]
    rows.append((f"{count(len(listed), 'invoice')}", "", money(total)))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return "\n".join(f"  {a:<{widths[0]}}  {b:<{widths[1]}}  {c:>{widths[2]}}".rstrip() for a, b, c in rows)


@contextmanager
def _progress(what: str):
    """A transient line on a terminal naming the invoice just issued (nothing when piped: the
    table after the run lists them all); yields the callback for run_period's `progress`."""
    if not err.is_terminal:
        yield None
        return
    with err.status(what) as shown:
        yield lambda number: shown.update(f"{what}: {terminal_text(number)}")


@app.command("show")
def invoice_show(
    period: Optional[str] = typer.Option(None, help="Billing period YYYY-MM (with --tenant: the invoice that stands, "
                                         "issued or else its draft)."),
    tenant: Optional[str] = typer.Option(None, help="Tenant id (with --period)."),
    number: Optional[str] = typer.Option(None, "--number", help="An invoice number or draft id, in whatever state "
                                         "(instead of --period and --tenant)."),
    fmt: str = typer.Option("json", "--format", help="json, csv or pdf (pdf needs --out)."),
    out_file: Optional[Path] = typer.Option(None, "--out", help="Write to this file instead of stdout."),
    lang: str = typer.Option("en", "--lang", help="Language of the PDF: en or zh-CN (JSON and CSV are the same "
                             "in every language)."),
) -> None:
    """Print one invoice: by --number, or the one of --period and --tenant that stands (a draft is marked DRAFT)."""
    from billing.errors import NotFound
    from reports.invoice_document import invoice_document
    from reports.render import render_invoice

    check_format(fmt, "json", "csv", "pdf")
    check_choice("--lang", lang, LANGS)
    if number is None and (period is None or tenant is None):
        raise GpubillError("say which invoice: --number N, or --period YYYY-MM and --tenant T "
                           "(see gpubill invoice show --help)")
    if number is not None and (period is not None or tenant is not None):
        raise GpubillError("give either --number or --period and --tenant, not both (see gpubill invoice show --help)")
    settings = load_settings()
    rules = read_rules(settings)
    with connect(settings) as database:
        if number is not None:
            try:
                document = invoice_document(database, rules, None, number=number)
            except NotFound:
                raise GpubillError(f"no invoice or draft {number!r}; `gpubill invoice list` shows them") from None
        else:
            one, period = tenant, check_period(period)  # any id: documents of ids outside the syntax are shown too
            try:
                document = invoice_document(database, rules, one, period)
            except NotFound:
                raise _no_invoice(database, one, period) from None
        data = render_invoice(document, fmt, lang=lang)
    emit(data, out_file, binary=fmt == "pdf")


@app.command("list")
def invoice_list(
    period: Optional[str] = typer.Option(None, help="Only this billing period YYYY-MM."),
    tenant: Optional[str] = typer.Option(None, help="Only this tenant."),
    status: Optional[str] = typer.Option(None, help="Only draft, issued or voided invoices."),
    as_json: bool = typer.Option(False, "--json", help="One JSON array."),
) -> None:
    """Invoices and drafts with their state, what they replace and their credit notes."""
    from billing import invoice_store

    if status is not None:
        check_choice("--status", status, invoice_store.STATUSES)
    settings = load_settings()
    rules = read_rules(settings)
    with connect(settings) as database:
        rows = _listed(database, invoice_store.headers(database, period=check_period(period) if period else None,
                                                       tenant=tenant, status=status), rules)
    _print_invoices(rows, as_json)


@app.command("drafts")
def invoice_drafts(
    period: Optional[str] = typer.Option(None, help="Only this billing period YYYY-MM."),
    as_json: bool = typer.Option(False, "--json", help="One JSON array."),
) -> None:
    """The drafts waiting for review (billing.toml review = "manual"); `invoice issue` issues them."""
    from billing import invoice_store

    settings = load_settings()
    with connect(settings) as database:
        rows = _listed(database, invoice_store.headers(database, period=check_period(period) if period else None,
                                                       status="draft"))
    if not rows and not as_json:
        out.print("no drafts waiting for review" + (f" in {period}" if period else ""))
        return
    _print_invoices(rows, as_json)


@app.command("issue")
def invoice_issue(
    period: str = typer.Option(..., help="Billing period YYYY-MM whose drafts to issue."),
    tenant: Optional[str] = typer.Option(None, help="Only this tenant's draft."),
    offline: bool = typer.Option(False, "--offline", help=OFFLINE_HELP),
) -> None:
    """Issue the period's drafts (a replacement too): each is re-built from the data as it is now, then numbered."""
    from billing.invoicing import issue_period

    settings = load_settings()
    rules = read_rules(settings)
    period = check_period(period)
    with connect(settings) as database:
        # the drafts are re-built from the data as it is now: with every correction on the log (issue 36)
        take_corrections_to_end(database, settings, f"invoice issue {period}", offline=offline)
        with open_books(database, settings, numbered=True, rules=rules):
            issued = issue_period(database, rules, period, tenant=tenant,
                                  on_wait=lambda message: err.print(terminal_text(message), highlight=False))
    out.print(f"{period}: {count(len(issued), 'invoice')} issued")
    for draft_id, number in issued:
        out.print(f"  {terminal_text(draft_id)} → {terminal_text(number)}", highlight=False)


@app.command("void")
def invoice_void(
    number: str = typer.Argument(..., help="The issued invoice's number (GB-YYYY-NNNNNN)."),
    reason: str = typer.Option(..., "--reason", help="Why it is voided (kept on the credit note and in the journal)."),
) -> None:
    """Void an issued invoice: a credit note for all still creditable, then the next `invoice run` issues its
    replacement. Each earlier credit note is named with what becomes of it: a goodwill note is carried by the
    replacement as a concession, the others are superseded by the correction."""
    from billing.concessions import voided_fates
    from billing.credit_notes import void_invoice

    settings = load_settings()
    rules = read_rules(settings)
    with connect(settings) as database, open_books(database, settings, numbered=True, rules=rules):
        invoice, note = void_invoice(database, rules, number, reason,
                                     on_wait=lambda message: err.print(terminal_text(message), highlight=False))
        earlier = voided_fates(database, invoice, note.number if note else "")
    credited = f"credit note {note.number}: {note.total:.2f} CNY with VAT back to the tenant" if note else \
        "nothing was left to credit"
    out.print(f"{terminal_text(invoice.number)} voided ({credited}); `gpubill invoice run --period {invoice.period}` "
              "issues its replacement", highlight=False)
    for fate in earlier:
        out.print(f"  {terminal_text(fate.text(planned=True))}", highlight=False)


@app.command("write-off")
def invoice_write_off(
    number: str = typer.Argument(..., help="The issued invoice's number (GB-YYYY-NNNNNN)."),
    reason: str = typer.Option(..., "--reason", help="Why it is uncollectible (kept with the write-off and in the "
                               "journal)."),
) -> None:
    """Mark what an issued invoice still asks as uncollectible: a fact, dated today. A later payment to it still
    counts (it recovers the write-off)."""
    import re

    from billing.payments import PaymentRefused, check_text, write_off
    from billing.tenants import shown_value

    if not re.fullmatch(r"GB-[0-9]{4}-[0-9]{6}", number, flags=re.ASCII):  # checked before anything is opened
        raise PaymentRefused(f"{shown_value(number)} is not an invoice number GB-YYYY-NNNNNN; `gpubill invoice list` "
                             "shows them")
    reason = check_text(reason, "--reason")
    if not reason:
        raise PaymentRefused("--reason is required: say why the invoice is written off")
    settings = load_settings()
    rules = read_rules(settings)
    with connect(settings) as database, open_books(database, settings, numbered=True, rules=rules):
        amount = write_off(database, rules, number, reason,
                           on_wait=lambda message: err.print(terminal_text(message), highlight=False))
    out.print(f"{terminal_text(number)}: {amount:.2f} CNY written off as uncollectible; a later payment to it still "
              "counts", highlight=False)


@app.command("history")
def invoice_history(
    number: str = typer.Argument(..., help="An invoice number or draft id."),
    as_json: bool = typer.Option(False, "--json", help="One JSON array of journal entries."),
) -> None:
    """Every change of the invoice's state: made, refreshed, issued, credited, voided, replaced — when, by whom, why."""
    from billing import invoice_store
    from billing.errors import NotFound
    from billing.journal import history

    settings = load_settings()
    with connect(settings) as database:
        try:
            found = invoice_store.find(database, number)
        except NotFound:
            raise GpubillError(f"no invoice or draft {number!r}; `gpubill invoice list` shows them") from None
        entries = history(database, [found.id, found.number])
    if as_json:
        import orjson

        sys.stdout.write(orjson.dumps([{**e.__dict__, "at": e.at.isoformat(timespec="microseconds")}
                                       for e in entries]).decode() + "\n")
        return
    for e in entries:
        other = f" {e.document}" if e.document else ""
        why = f" — {e.reason}" if e.reason else ""
        out.print(f"{e.at:%Y-%m-%d %H:%M:%S}Z  {terminal_text(e.action):<16} {terminal_text(e.invoice)}"
                  f"{terminal_text(other)}  by {terminal_text(e.actor)}{terminal_text(why)}  {terminal_text(e.detail)}",
                  highlight=False)


def _listed(db, headers, rules=None) -> list[dict]:
    """Rows of `invoice list`/`drafts`: each header with its credit notes and replacement; given `rules`,
    also what each issued (or voided) invoice has been paid and still asks today (issue 38)."""
    from billing.accounts import invoice_payments
    from billing.credit_notes import credit_notes
    from reports.render.invoice import payment_fields

    tenants = {h.tenant for h in headers}
    states = {} if rules is None or not headers else invoice_payments(
        db, rules, next(iter(tenants)) if len(tenants) == 1 else None)

    notes: dict[str, list[str]] = {}
    for note in credit_notes(db):
        notes.setdefault(note.invoice, []).append(note.number)
    replaced_by = {h.replaces: h.number or h.id for h in headers if h.replaces}
    return [{"id": h.id, "number": h.number, "tenant": h.tenant, "period": h.period, "status": h.status,
             "revision": h.revision, "issued_at": h.issued_at, "total": f"{h.total:.2f}", "currency": h.currency,
             "replaces": h.replaces, "replaced_by": replaced_by.get(h.number, "") if h.number else "",
             "credit_notes": notes.get(h.number, []) if h.number else [], "rules_revision": h.rules_revision,
             **({"due_date": str(states[h.number].due_on) if h.number in states and h.status == "issued" else None,
                 **payment_fields(states.get(h.number) if h.number else None)} if rules is not None else {})}
            for h in headers]


def _print_invoices(rows: list[dict], as_json: bool) -> None:
    if as_json:
        import orjson

        sys.stdout.write(orjson.dumps(rows).decode() + "\n")
        return
    for row in rows:
        extra = "".join([f"  {row['payment_state']}, outstanding {row['outstanding']}" if row.get("payment_state") else "",
                         "  OVERDUE" if row.get("overdue") else "",
                         f"  replaces {row['replaces']}" if row["replaces"] else "",
                         f"  replaced by {row['replaced_by']}" if row["replaced_by"] else "",
                         f"  credit notes {', '.join(row['credit_notes'])}" if row["credit_notes"] else ""])
        out.print(f"  {terminal_text(row['number'] or row['id']):<20} {row['period']}  {terminal_text(row['tenant']):<24}"
                  f" {row['status']:<7} {row['total']:>14} {row['currency']}{terminal_text(extra)}", highlight=False)


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
