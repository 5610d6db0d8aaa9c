"""`gpubill receivables` and `gpubill statement`: what tenants owe and since when, and one tenant's
statement of account (issue 38; billing/accounts.py reads, billing_rules/accounts.py adds up).

Both read the database as it stands (the projection of the books) and write nothing: no books are
opened. Dates are days in the billing time zone (billing.toml `billing_timezone`); money is CNY
with VAT, two decimals.
"""

from __future__ import annotations

import csv
import io
import re
from datetime import date
from pathlib import Path
from typing import Optional

import typer

from gpubill.cli.common import check_format, connect, emit, err, out, read_rules, terminal_text
from gpubill.cli.report import check_choice
from gpubill.config import load_settings
from gpubill.errors import GpubillError
from reports.render.i18n import LANGS

RECEIVABLES_COLUMNS = ("tenant", "current", "d1_30", "d31_60", "d61_90", "d90_plus", "outstanding", "unapplied")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", flags=re.ASCII)  # ASCII digits: \d takes "２０２６" too


def check_date(text: str, option: str) -> date:
    """`text` as a date YYYY-MM-DD of the calendar; a one-line error naming `option` if not."""
    from billing.tenants import shown_value

    if not _DATE.fullmatch(text or ""):
        raise GpubillError(f"{option}: {shown_value(text or '')} is not a date YYYY-MM-DD")
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise GpubillError(f"{option}: {text} is not a date of the calendar") from None


def receivables(
    as_of: Optional[str] = typer.Option(None, "--as-of", help="YYYY-MM-DD in the billing time zone: count only "
                                        "documents issued and payments received on or before it (default: today)."),
    fmt: str = typer.Option("table", "--format", help="table, csv or json."),
) -> None:
    """Aging of receivables by due date, per tenant and in total: not yet due, 1-30, 31-60, 61-90 and over 90 days
    past due, what is outstanding, and the credit each tenant holds (unapplied)."""
    from billing.accounts import receivables as aging_of, today

    check_format(fmt, "table", "csv", "json")
    day = check_date(as_of, "--as-of") if as_of is not None else None
    settings = load_settings()
    rules = read_rules(settings)
    day = day or today(rules)
    if day > today(rules):
        err.print(f"--as-of {day} is after today ({today(rules)}): what is received or issued from now on is not "
                  "counted yet", highlight=False)
    with connect(settings) as database:
        rows, total = aging_of(database, rules, day)
    if fmt == "json":
        import orjson

        emit(orjson.dumps({"as_of": str(day), "currency": "CNY", "tenants": [r.as_dict() for r in rows],
                           "total": _without_tenant(total.as_dict())}, option=orjson.OPT_INDENT_2), None)
    elif fmt == "csv":
        emit(receivables_csv(rows, total), None)
    else:
        _print_table(rows, total, day)


def receivables_csv(rows, total) -> str:
    """One row per tenant (by id), then the total: the row whose tenant is empty. Money with two decimals."""
    from reports.render.format import csv_cell

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=RECEIVABLES_COLUMNS, lineterminator="\r\n")
    writer.writeheader()
    for row in [*rows, total]:
        writer.writerow({k: csv_cell(v) for k, v in row.as_dict().items()})
    return buf.getvalue()


def _without_tenant(figures: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in figures.items() if k != "tenant"}


def _print_table(rows, total, day: date) -> None:
    from rich.table import Table

    table = Table("tenant", "not yet due", "1-30 days", "31-60 days", "61-90 days", "over 90 days", "outstanding",
                  "unapplied")
    for column in table.columns[1:]:
        column.justify = "right"
    for row in rows:
        figures = row.as_dict()
        table.add_row(terminal_text(row.tenant), *(figures[k] for k in RECEIVABLES_COLUMNS[1:]))
    figures = total.as_dict()
    table.add_row("total", *(figures[k] for k in RECEIVABLES_COLUMNS[1:]), style="bold")
    out.print(table)
    owing = sum(1 for r in rows if r.outstanding > 0)
    err.print(f"as of {day} (billing time zone): {owing:,} of {len(rows):,} tenants owe something; days past the due "
              "date; CNY with VAT", highlight=False)


def statement(
    tenant: str = typer.Option(..., "--tenant", help="The tenant id."),
    start: str = typer.Option(..., "--from", help="First day, YYYY-MM-DD (billing time zone)."),
    end: str = typer.Option(..., "--to", help="Last day, YYYY-MM-DD (billing time zone), included."),
    fmt: str = typer.Option("json", "--format", help="json, csv or pdf (pdf needs --out)."),
    lang: str = typer.Option("en", "--lang", help="Language of the PDF: en or zh-CN (JSON and CSV are the same in "
                             "every language)."),
    out_file: Optional[Path] = typer.Option(None, "--out", help="Write to this file instead of stdout."),
) -> None:
    """A tenant's statement of account (对账单): the opening balance, each invoice, credit note, payment, refund and
    write-off with the running balance, the closing balance and its aging."""
    from billing.errors import NotFound
    from reports.render import render_statement
    from reports.statement import statement_document

    check_format(fmt, "json", "csv", "pdf")
    check_choice("--lang", lang, LANGS)
    first, last = check_date(start, "--from"), check_date(end, "--to")
    if first > last:
        raise GpubillError(f"--from {first} is after --to {last}: give the first day, then the last")
    settings = load_settings()
    rules = read_rules(settings)
    with connect(settings) as database:
        try:
            document = statement_document(database, rules, tenant, first, last)
        except NotFound as exc:
            raise GpubillError(f"{exc}; `gpubill tenant list` shows the registered tenants") from None
    emit(render_statement(document, fmt, lang=lang), out_file, binary=fmt == "pdf")
