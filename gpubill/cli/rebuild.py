"""`gpubill rebuild --yes [--into DSN]`: an empty database made again from the log (issue 37).

The log is the system of record; ClickHouse is its projection. Rebuild fills an empty
database — the configured one after it was lost, or another (`--into`: a standby, a move from
the embedded default to a server) while the first keeps running — in three steps:

    1. the books (gpu.books.v1) projected from their first message: tenants, top-ups, budgets,
       keys, rule sets, every invoice, credit note and journal entry, billing runs, re-ratings;
    2. the usage: readings (gpu.usage.v1, gpu.power.v1) and corrections (gpu.corrections.v1)
       through the pipeline, `gpubill worker --drain` under a consumer group of the rebuild's own;
    3. every hour rolled up.

The rated data is what the pipeline makes of the readings and corrections under the rules in
use now; a period re-rated under other rules (gpubill rerate --apply) is not re-rated again here
(docs/deployment.md says what that leaves). The documents are the books' own, whatever the rules.

A target that holds anything is refused in one line: rebuild never merges into live books.
`--books-only` stops after step 1 (what a standby of the books needs; the benchmark's share).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Optional

import typer

from gpubill.cli.common import connect, count, err, out, read_rules, terminal_text
from gpubill.config import load_settings
from gpubill.errors import GpubillError

# What an empty database has none of: a rebuild is refused when any of these holds a row.
_FILLED = ("tenants", "invoices", "credit_notes", "balance_ledger", "api_keys", "books_positions", "readings_usage",
           "readings_power", "rated_seconds", "corrections")


def rebuild(
    yes: bool = typer.Option(False, "--yes", help="Really rebuild (the target must be empty)."),
    into: Optional[str] = typer.Option(None, "--into", metavar="DSN",
                                       help="Rebuild into this database instead of GPUBILL_CLICKHOUSE "
                                            "(chdb:///path or http(s)://user:pass@host:8123/db)."),
    books_only: bool = typer.Option(False, "--books-only", help="Project the books only; leave the usage out."),
) -> None:
    """Make an empty database again from the log: the books (every money fact), then readings and corrections."""
    if not yes:
        raise GpubillError("rebuild writes a whole database from the log: say --yes (the target must be empty)")
    settings = load_settings()
    if into:
        settings = settings.model_copy(update={"clickhouse": into})
    rules = read_rules(settings)
    started = time.monotonic()
    with connect(settings) as database:
        filled = {table: int(database.query(f"SELECT count() FROM {table}")[0][0]) for table in _FILLED}
        held = [f"{count(n, 'row')} in {table}" for table, n in filled.items() if n]
        if held:
            raise GpubillError(f"{terminal_text(settings.clickhouse)} is not empty ({', '.join(held[:3])}): rebuild "
                               "fills an empty database only; give --into DSN of an empty one")
        facts = _project_books(database, settings)
    books_s = time.monotonic() - started
    out.print(f"books: {count(facts, 'fact')} projected in {books_s:.1f} s", highlight=False)
    if books_only:
        return
    _drain_usage(settings)
    with connect(settings) as database:
        _roll_up(database, rules)
    out.print(f"rebuilt {terminal_text(settings.clickhouse)} from the log in {time.monotonic() - started:.1f} s",
              highlight=False)


def _project_books(database, settings) -> int:
    from rich.progress import Progress

    from streams.kafka.books import KafkaBooks

    with Progress(console=err, transient=True) as progress:
        task = progress.add_task("projecting the books", total=None)
        books = KafkaBooks(settings).open_reader()
        try:
            return books.catch_up(database, progress=lambda n: progress.update(task, completed=n))
        finally:
            books.close()


def _drain_usage(settings) -> None:
    """Step 2: the pipeline over the readings from their first offset, into the target, under a group
    of the rebuild's own (the running workers' offsets are not touched), live spend off."""
    group = f"{settings.group}.rebuild.{int(time.time())}"
    err.print(f"replaying readings and corrections through the pipeline (consumer group {terminal_text(group)})",
              highlight=False)
    env = {**os.environ, "GPUBILL_CLICKHOUSE": settings.clickhouse, "GPUBILL_GROUP": group, "GPUBILL_SPEND": "0"}
    done = subprocess.run([sys.executable, "-m", "gpubill.cli", "worker", "--drain"], env=env)
    if done.returncode:
        raise GpubillError(f"the replay of the readings failed (exit {done.returncode}); see its messages above. "
                           "The books are rebuilt; run `gpubill rebuild` again into an empty database")


def _roll_up(database, rules) -> None:
    """Step 3: every hour rolled up (reads are exact without it, only slower)."""
    from usage.rollup import roll_up

    report = roll_up(database, rules)
    out.print(f"{count(len(report.hours), 'hour')} rolled up", highlight=False)
