"""What every command module shares: the two consoles and the small helpers around them.

`out` is stdout (results: tables, figures, files' contents); `err` is stderr (progress,
"wrote FILE", errors), so a command's output can be piped.

Text that came from outside (tenants, sites, nodes, GPUs, instances, reasons, dead letters,
paths, messages that quote input) is printed through `terminal_text` — markup escaped,
control characters made visible — never as is: `out.print(f"{terminal_text(tenant)} ...")`,
or `table.add_row(terminal_text(site), ...)`. Files are written by `emit` (or
`reports.outputs.write_output`) with GPUBILL_FILE_MODE.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from rich.console import Console

from billing_rules import RuleSet, load_rules
from gpubill.config import Settings, load_settings
from gpubill.errors import GpubillError
from reports.outputs import write_output
from reports.render.format import terminal_text, visible_text

if TYPE_CHECKING:  # the client is imported by the commands that open the database, not by --help
    from warehouse.connection import Database

# emoji off: a tenant named ":fire:" is printed as ":fire:". Piped (not a terminal, no COLUMNS),
# rich would assume 80 columns and cut a table's figures to "-12.…": a pipe has no width, so the
# output is as wide as its tables need (PIPE_WIDTH) and never truncated.
PIPE_WIDTH = 1000


def _console(*, stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    piped = not stream.isatty() and "COLUMNS" not in os.environ
    return Console(stderr=stderr, emoji=False, width=PIPE_WIDTH if piped else None)


out = _console()
err = _console(stderr=True)

__all__ = ["check_format", "check_period", "connect", "count", "emit", "err", "money", "out", "print_figures",
           "read_rules", "take_corrections_to_end", "terminal_text"]

PERIOD = re.compile(r"[0-9]{4}-(0[1-9]|1[0-2])")  # ASCII digits: \d takes "２０２６" too


def read_rules(settings: Settings, directory: Optional[Path] = None) -> RuleSet:
    """The rule set in `directory`, or in GPUBILL_RULES; validated as a whole."""
    return load_rules(Path(directory or settings.rules))


def connect(settings: Settings) -> Database:
    """Open GPUBILL_CLICKHOUSE and apply any pending schema migrations first (on a cluster,
    GPUBILL_CLICKHOUSE_CLUSTER: refuse while any is pending, warehouse/connection.py)."""
    from warehouse.connection import open_database

    return open_database(settings.clickhouse, cluster=settings.clickhouse_cluster)


OFFLINE_HELP = ("Do not read the log of corrections (gpu.corrections.v1) first: plan with the corrections already "
                "stored, and say so. Without it, a log that cannot be read refuses the command.")


def take_corrections_to_end(database: Database, settings: Settings, before: str, *,
                            offline: bool | None = None, say: Callable[[str], None] | None = None):
    """The log of corrections taken into `database` to its end before `before` plans (streams/
    corrections_sync.py `sync_to_end`): a worker need not run. What was stored now is said on
    stderr (or to `say`: the scheduler's log); a topic that cannot be read, or corrections that
    cannot be stored, refuse in one line. `offline` (the commands' --offline): the log is not
    read, and stderr says what that leaves out; False where the command has the option (the
    refusal names it), None where it has not. What every command that plans or issues money
    from the database calls first: rerate, verify-log, audit, invoice run and issue, a drain,
    the scheduler's billing job."""
    import time

    from streams.corrections_sync import sync_to_end

    if offline:
        (stored,) = database.query("SELECT count() FROM corrections")[0]
        err.print(f"{before}: --offline: the log of corrections was not read; the {int(stored):,} corrections stored "
                  "are applied, any on gpu.corrections.v1 and not stored yet are left out", highlight=False, soft_wrap=True)
        return None

    from streams.errors import CorrectionsNotSynced

    try:
        report = sync_to_end(database, settings, int(time.time()), before=before)
    except CorrectionsNotSynced as exc:
        if offline is None:
            raise
        raise GpubillError(f"{exc} (--offline plans with the corrections already stored)") from exc
    if report.changed:
        said = (f"corrections taken from the log first: {len(report.stored):,} stored, {len(report.conflicts):,} "
                f"conflicts, {len(report.dead):,} dead-lettered ({report.read:,} messages on the topic)")
        if say is not None:
            say(said)
        else:
            err.print(said, highlight=False, soft_wrap=True)
    return report


def check_period(period: str) -> str:
    """`period` if it is a month like 2026-03; a one-line error naming --period if not."""
    if not PERIOD.fullmatch(period):
        raise GpubillError(f"--period: {period!r} is not a month like 2026-03")
    return period


def check_format(fmt: str, *allowed: str) -> str:
    """`fmt` if it is one of `allowed`; a one-line error naming --format and the choices if not.
    Checked before anything is opened or read."""
    if fmt not in allowed:
        raise GpubillError(f"--format: {fmt!r} is not one of {', '.join(allowed)}")
    return fmt


def emit(data: bytes | str, out_file: Optional[Path], *, binary: bool = False) -> None:
    """Write a rendered report to `out_file` (whole, with GPUBILL_FILE_MODE), or to stdout when it is text."""
    raw = data.encode() if isinstance(data, str) else data
    if out_file:
        write_output(out_file, raw, load_settings().file_mode)
        err.print(f"wrote {terminal_text(out_file)}", highlight=False)
    elif binary:
        raise GpubillError("this format is binary: give --out FILE")
    else:
        text = raw.decode()
        if sys.stdout.isatty():  # on a screen, a report's text cannot drive the terminal; piped: as it is
            text = visible_text(text.replace("\r\n", "\n"), keep="\n\t")
        sys.stdout.write(text)
        if not text.endswith("\n"):
            sys.stdout.write("\n")


def print_figures(result: dict, as_json: bool) -> None:
    """A benchmark's figures: one JSON object, or a name and value a line."""
    if as_json:
        import orjson

        sys.stdout.write(orjson.dumps(result).decode() + "\n")
        return
    for name, value in result.items():
        out.print(f"{terminal_text(name):>20}  {terminal_text(value)}", highlight=False)


def count(n: int, noun: str, plural: str | None = None) -> str:
    """`1 invoice`, `0 invoices`, `2 invoices`, `1,234 readings`: a number and its noun, in English."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def money(amount) -> str:
    """An amount for a terminal: `¥1,234.56`, `-¥10.00` (ASCII minus: it pastes into a spreadsheet);
    half up to the fen (reports.render.format.yuan_str)."""
    from reports.render.format import yuan_str

    return yuan_str(amount)
