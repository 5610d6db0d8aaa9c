"""`gpubill rebuild --yes [--into DSN]`: an empty database made again from the log (issue 37).

The log is the system of record; ClickHouse is its projection. Rebuild fills an empty
database — the configured one after it was lost, or another (`--into`: a standby, a move from
the embedded default to a server) while the first keeps running — in three steps:

    1. the books (gpu.books.v1) projected from their first message: tenants, top-ups, budgets,
       keys, rule sets, every invoice, credit note and journal entry, billing runs, re-ratings;
    2. the usage, as `gpubill verify-log` replays it (streams/log_replay.py): the readings
       (gpu.usage.v1, gpu.power.v1) from their first offset through the worker's pipeline, outside
       any consumer group (the running workers' offsets are not touched, nothing is produced);
       then the corrections (gpu.corrections.v1), after the readings whose cards they name — taken
       first, into an empty database, each would be dead-lettered for naming a card with no
       readings, and the rated data would come back uncorrected; then every period the books
       say was re-rated (`rerate --apply`) or invoiced under other rules than today's published
       again, corrected and priced under the revision that priced it;
    3. every hour rolled up.

The rated data is what the pipeline makes of the readings and corrections; each invoiced period
is then priced again under the revision the books say priced it — its latest re-rating's, else
its invoices' — from the rule files on the books (billing/rule_sets.py). The documents are the
books' own, whatever the rules.

A target that holds anything is refused in one line: rebuild never merges into live books.
`--books-only` stops after step 1 (what a standby of the books needs; the benchmark's share).
"""

from __future__ import annotations

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
    from warehouse.connection import redact

    settings = load_settings()
    if into:
        settings = settings.model_copy(update={"clickhouse": into})
    rules = read_rules(settings)
    started = time.monotonic()
    with connect(settings) as database:
        filled = {table: int(database.query(f"SELECT count() FROM {table}")[0][0]) for table in _FILLED}
        held = [f"{count(n, 'row')} in {table}" for table, n in filled.items() if n]
        if held:
            raise GpubillError(f"{terminal_text(redact(settings.clickhouse))} is not empty ({', '.join(held[:3])}): "
                               "rebuild fills an empty database only; give --into DSN of an empty one")
        facts = _project_books(database, settings)
    books_s = time.monotonic() - started
    out.print(f"books: {count(facts, 'fact')} projected in {books_s:.1f} s", highlight=False)
    if books_only:
        return
    with connect(settings) as database:
        _replay_usage(database, settings, rules)
        _roll_up(database, rules)
    out.print(f"rebuilt {terminal_text(redact(settings.clickhouse))} from the log in {time.monotonic() - started:.1f} s",
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


def _replay_usage(database, settings, rules) -> None:
    """Step 2: readings, then corrections, then the re-rated periods switched again (module docstring)."""
    from rich.progress import Progress

    from streams.corrections_sync import sync_corrections
    from streams.errors import StreamsError
    from streams.log_replay import rate_readings, readings_ends
    from usage.regenerate import RegenerateRefused, regenerate

    try:
        ends = readings_ends(settings)
        began = time.monotonic()
        with Progress(console=err, transient=True) as progress:
            task = progress.add_task("replaying the readings", total=sum(ends.values()))
            messages = rate_readings(database, rules, settings, ends,
                                     progress=lambda done, _: progress.update(task, completed=done))
        rated_s = time.monotonic() - began
        synced = sync_corrections(database, settings, int(time.time()))
        out.print(f"usage: {count(messages, 'readings message')} rated in {rated_s:.1f} s "
                  f"({messages / max(rated_s, 1e-9):,.0f}/s), {count(len(synced.stored), 'correction')} stored",
                  highlight=False)
        for period, priced in _pricing(database, rules):
            switched = regenerate(database, priced, period)
            out.print(f"{period}: priced again under rules {priced.revision} ({count(switched.corrections, 'correction')},"
                      f" {count(len(switched.hours), 'hour')} published anew)", highlight=False)
    except (StreamsError, RegenerateRefused) as exc:
        raise GpubillError(f"the replay of the usage failed: {exc}. The books are rebuilt; run `gpubill rebuild` "
                           "again into an empty database") from exc


def _pricing(database, rules) -> list:
    """(period, rule set) for each period to publish again after the replay: a re-rated one, or one
    invoiced under other rules than today's, under the revision the books say priced it (its rule
    files are on the books); today's rules where the books lack them, said so."""
    from billing.rule_sets import priced_under, rules_of

    re_rated = {row[0] for row in database.query("SELECT DISTINCT period FROM rerate_runs")}
    out = []
    for period, revision in sorted({**{p: rules.revision for p in re_rated}, **priced_under(database)}.items()):
        if revision == rules.revision:
            if period in re_rated:
                out.append((period, rules))
            continue
        priced = rules_of(database, revision)
        if priced is None:
            err.print(f"[yellow]{terminal_text(period)} was priced under rules {terminal_text(revision)}, which the "
                      "books do not hold: rated under today's[/yellow]", highlight=False)
            if period in re_rated:
                out.append((period, rules))
            continue
        out.append((period, priced))
    return out


def _roll_up(database, rules) -> None:
    """Step 3: every hour rolled up (reads are exact without it, only slower)."""
    from usage.rollup import roll_up

    report = roll_up(database, rules)
    out.print(f"{count(len(report.hours), 'hour')} rolled up", highlight=False)
