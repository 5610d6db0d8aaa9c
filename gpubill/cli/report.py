"""`gpubill report cost-share|usage` (finance's and customers' reports) and `gpubill audit`.

`audit` is a top-level command (gpubill/cli/__init__.py registers it) but lives here: it
reads the same rated data as the reports and checks it against the raw readings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from billing_rules import load_rules
from gpubill.cli.common import (
    OFFLINE_HELP, check_format, check_period, connect, emit, out, read_rules, take_corrections_to_end, terminal_text,
)
from gpubill.config import load_settings
from gpubill.errors import GpubillError
from reports.render.i18n import LANGS
from reports.usage_model import GRANULARITIES

app = typer.Typer(help="Finance and customer reports.", no_args_is_help=True)


@app.command("cost-share")
def report_cost_share(
    period: str = typer.Option(..., help="Billing period YYYY-MM."),
    what_if_site: Optional[str] = typer.Option(None, help="Also price the same energy at this site."),
    what_if_rules: Optional[Path] = typer.Option(None, help="Also price the same usage under this rule set."),
    fmt: str = typer.Option("table", "--format", help="table, csv or json."),
    out_file: Optional[Path] = typer.Option(None, "--out", help="Write to this file instead of stdout."),
) -> None:
    """Per site and GPU model: cards, GPU-hours, rent, electricity billed and idle, share, green kWh."""
    from reports.cost_share import cost_share, store_cost_share, what_if
    from reports.render import render_cost_share

    check_format(fmt, "table", "csv", "json")
    settings = load_settings()
    rules = read_rules(settings)
    with connect(settings) as database:
        rows = cost_share(database, rules, check_period(period))
        store_cost_share(database, period, rows)
        compared = None
        if what_if_site or what_if_rules:
            other = load_rules(what_if_rules) if what_if_rules else None
            compared = what_if(database, rules, period, rows, other_site=what_if_site, other_rules=other)
    emit(render_cost_share(rows, fmt, what_if=compared), out_file)


@app.command("usage")
def report_usage(
    tenant: str = typer.Option(..., help="Tenant id."),
    period: str = typer.Option(..., help="Billing period YYYY-MM."),
    fmt: str = typer.Option("csv", "--format", help="csv, json, parquet or pdf."),
    out_file: Path = typer.Option(..., "--out", help="File to write."),
    lang: str = typer.Option("en", "--lang", help="Language of the PDF's labels: en or zh-CN (CSV, JSON and "
                             "Parquet keep their machine column names)."),
    granularity: str = typer.Option("day", "--granularity", help="One row per day or per hour (billing time zone)."),
) -> None:
    """A customer's usage report: per day (or hour), instance and GPU."""
    from billing.tenants import is_known, unknown_tenant
    from reports.render import render_usage
    from reports.usage_report import usage_report

    check_format(fmt, "csv", "json", "parquet", "pdf")
    check_choice("--lang", lang, LANGS)
    check_choice("--granularity", granularity, GRANULARITIES)
    settings = load_settings()
    rules = read_rules(settings)
    one = tenant  # any id: an id outside the syntax has its report too (tests/unit/test_output_safety.py)
    with connect(settings) as database:
        report = usage_report(database, rules, one, check_period(period), granularity=granularity)
        if not report.rows and not is_known(database, one):  # nothing written for an id nobody knows
            raise unknown_tenant(one)
    emit(render_usage(report, fmt, lang=lang), out_file)


def check_choice(option: str, value: str, allowed: tuple[str, ...]) -> str:
    """`value` if it is one of `allowed`; a one-line error naming `option` and the choices if not.
    Checked before anything is opened or read."""
    if value not in allowed:
        raise GpubillError(f"{option}: {value!r} is not one of {', '.join(allowed)}")
    return value


def audit(
    period: str = typer.Option(..., help="Billing period YYYY-MM."),
    full: bool = typer.Option(False, "--full", help="Recompute every hour from the raw readings, none taken from "
                              "the last clean audit."),
    offline: bool = typer.Option(False, "--offline", help=OFFLINE_HELP),
) -> None:
    """Recompute the period from raw readings and compare with the rated data; exit 1 on differences.

    Hours unchanged since the last clean audit (their raw and rated rows, corrections and rules)
    are taken from it; the others are recomputed. --full recomputes all of them."""
    from rich.table import Table

    from reports.audit import audit_period, conflicts_of, correction_findings

    settings = load_settings()
    rules = read_rules(settings)
    from usage.rated import retained_periods

    period = check_period(period)
    with connect(settings) as database:
        # the raw side applies the stored corrections: every one on the log first (issue 36)
        take_corrections_to_end(database, settings, f"audit {period}", offline=offline)
        found = audit_period(database, rules, period, full=full)
        figures, differences = found.figures, found.differences
        conflicts = conflicts_of(database, rules, period)
        corrections = correction_findings(database, rules, period)
        retained = period in retained_periods(database)
        from billing.books_projection import halts

        stopped = halts(database)
    source = "from rollups: retention dropped the raw readings after archiving them" if retained else "from raw readings"
    table = Table("tenant", "rented GPU-s", "energy mJ", "rent", "electricity", title=f"Audit {period} ({source})")
    for tenant, f in sorted(figures.items()):
        table.add_row(terminal_text(tenant) if tenant else "(unallocated)", f"{f.rent_seconds:,}", f"{f.energy_mj:,}",
                      str(f.rent), str(f.electricity))
    out.print(table)
    if conflicts.count:  # SPEC §4: recorded, and the first reading counted; shown, never invisible
        reasons = ", ".join(f"{n:,} {terminal_text(reason)}" for reason, n in conflicts.by_reason.items())
        out.print(f"conflicts of {period}: {conflicts.count:,} ({reasons}); first {len(conflicts.examples)}:", highlight=False)
        for example in conflicts.examples:
            out.print(f"  CONFLICT {terminal_text(example.describe())}", highlight=False, soft_wrap=True)
    else:
        out.print(f"conflicts of {period}: none", highlight=False)
    # corrections that do not count (streams/corrections_sync.py): shown like the readings' conflicts
    if corrections.conflicts:
        out.print(f"correction conflicts of {period}: {len(corrections.conflicts):,}", highlight=False)
        for conflict in corrections.conflicts:
            out.print(f"  CONFLICT {terminal_text(conflict.describe())}", highlight=False, soft_wrap=True)
    else:
        out.print(f"correction conflicts of {period}: none", highlight=False)
    out.print(f"corrections dead-lettered (any period): {corrections.deadlettered:,}"
              + (" — `gpubill dlq list` shows them" if corrections.deadlettered else ""), highlight=False)
    out.print(_audit_mode(found), highlight=False, soft_wrap=True)
    # the books' projection (issue 37): where it stopped at a message it cannot read, never skipped
    for topic, partition, offset, why in stopped:
        out.print(f"BOOKS HALTED {terminal_text(why)} — money commands refuse until a gpubill that reads it "
                  "projects it", highlight=False, soft_wrap=True)
    if not stopped:
        out.print("books: projected to the last message read, none unreadable", highlight=False)
    if differences:
        for d in differences:
            who = terminal_text(d.tenant) if d.tenant else "(unallocated)"
            out.print(f"DIFFERENCE {who} {terminal_text(d.what)}: raw {terminal_text(d.raw)} vs rated "
                      f"{terminal_text(d.rated)}", highlight=False, soft_wrap=True)
        raise GpubillError(f"audit of {period}: {len(differences)} differences between raw readings and rated data")
    if stopped:
        raise GpubillError(f"audit of {period}: the books' projection stopped at {len(stopped)} message(s) it cannot read")
    if retained:
        out.print(f"audit of {period}: clean — no rows written after retention; the raw readings are checked by "
                  "`gpubill archive verify`", soft_wrap=True)
    else:
        out.print(f"audit of {period}: clean — rated data equals the batch join of the raw readings", soft_wrap=True)


def _audit_mode(found) -> str:
    """One line: which audit ran and how many hours it recomputed, took from the last clean audit and kept."""
    if found.mode == "rollups":
        return "audit mode: rollups only (retention dropped the raw readings); nothing recomputed"
    taken = f", {found.taken:,} taken from the last clean audit" if found.mode == "incremental" else ""
    return (f"audit mode: {found.mode} — {found.recomputed:,} of {found.hours:,} hours recomputed{taken}; "
            f"{found.stored:,} stored as clean")
