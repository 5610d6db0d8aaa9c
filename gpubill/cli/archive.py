"""`gpubill archive` and `gpubill retention`: archive a period's per-second rows, verify an
archive, drop what is archived (reports/archive.py and reports/retention.py do the work).

    gpubill archive --period P --out DIR      write the Parquet files and manifest.json
    gpubill archive verify DIR                check them (and against the database); records it
    gpubill retention apply --period P        drop P's per-second rows (invoiced, rolled up, verified)
    gpubill retention apply                   the same for every period older than the latest
                                              GPUBILL_RETAIN_PERIODS (or --keep-periods); unset: nothing
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpubill.cli.common import check_period, connect, err, out, read_rules, terminal_text
from gpubill.config import load_settings
from gpubill.errors import GpubillError

if TYPE_CHECKING:
    from reports.retention import RetentionResult

app = typer.Typer(
    help="Archive a period's per-second rows to Parquet (`--period P --out DIR`), or verify an archive.",
    invoke_without_command=True,
)
retention_app = typer.Typer(help="Drop per-second rows of archived, invoiced, rolled-up periods.",
                            no_args_is_help=True)


@app.callback()
def archive(
    ctx: typer.Context,
    period: Annotated[str | None, typer.Option(help="Billing period YYYY-MM (billing time zone) to archive.")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="A new or empty directory for the archive.")] = None,
) -> None:
    """Write the period's rated seconds and raw readings as Parquet (zstd) with a manifest."""
    if ctx.invoked_subcommand is not None:
        if period is not None or out_dir is not None:
            raise GpubillError(f"--period and --out belong to `gpubill archive`, not `archive {ctx.invoked_subcommand}`")
        return
    if period is None or out_dir is None:
        raise GpubillError("give --period P --out DIR to archive a period, or `gpubill archive verify DIR`")
    check_period(period)
    from reports.archive import write_archive

    settings = load_settings()
    rules = read_rules(settings)
    with connect(settings) as database:
        summary = write_archive(database, rules, period, out_dir,
                                progress=lambda line: err.print(f"[dim]{terminal_text(line)}[/dim]"))
    counts = ", ".join(f"{table} {rows}" for table, rows in summary.rows.items())
    directory = terminal_text(summary.directory)
    out.print(f"{period}: {summary.files} files ({terminal_text(counts)} rows) in {directory}; "
              f"next: gpubill archive verify {directory}", highlight=False, soft_wrap=True)


@app.command("verify")
def verify(directory: Annotated[Path, typer.Argument(help="The archive's directory (holds manifest.json).")]) -> None:
    """Check every file against the manifest, and the manifest against the database; one line, exit 0 if all agree."""
    from reports.archive import verify_archive

    settings = load_settings()
    rules = read_rules(settings)
    with connect(settings) as database:
        done = verify_archive(database, rules, directory)
    against = "and the database's rows" if done.against_db else "(the period's rows were dropped: files only)"
    # the period and checksum are read from the archive's manifest: a file from outside
    out.print(f"ok: {terminal_text(done.period)}, {done.files} files, {done.rows} rows match the manifest {against}; "
              f"manifest sha256 {terminal_text(done.manifest_sha256[:12])}", highlight=False, soft_wrap=True)


@retention_app.command("apply")
def retention_apply(
    period: Annotated[str | None, typer.Option(help="Drop this period's per-second rows (YYYY-MM).")] = None,
    keep_periods: Annotated[int | None, typer.Option(min=1, help="Keep the latest N periods, the current one "
                            "included (default: GPUBILL_RETAIN_PERIODS; unset: keep everything).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Check and say what would be dropped; drop nothing.")] = False,
) -> None:
    """Drop the per-second rows of closed, invoiced, rolled-up, archived and verified periods."""
    from reports.errors import ReportsError
    from reports.retention import apply_retention, periods_due

    settings = load_settings()
    keep = keep_periods if keep_periods is not None else settings.retain_periods
    if period is not None and keep_periods is not None:
        raise GpubillError("give --period or --keep-periods, not both")
    if period is None and keep is None:
        out.print("retention is off (GPUBILL_RETAIN_PERIODS unset, no --period or --keep-periods): nothing dropped")
        return
    rules = read_rules(settings)
    with connect(settings) as database:
        if period is not None:
            _print(apply_retention(database, rules, check_period(period), dry_run=dry_run))
            return
        refused = 0
        for each in periods_due(database, rules, keep):
            try:
                _print(apply_retention(database, rules, each, dry_run=dry_run))
            except ReportsError as exc:
                refused += 1
                err.print(f"[red]{terminal_text(each)}: refused:[/red] {terminal_text(exc)}", highlight=False,
                          soft_wrap=True)
    if refused:
        raise GpubillError(f"{refused} periods older than the latest {keep} kept their per-second rows (reasons above)")


def _print(result: RetentionResult) -> None:
    rows = ", ".join(f"{table} {n}" for table, n in result.rows.items()) or "no rows left"
    out.print(f"{terminal_text(result.period)}: {terminal_text(result.status)} ({terminal_text(rows)}); "
              f"archive {terminal_text(result.archive)}", highlight=False, soft_wrap=True)
