"""The books' projection (issue 37): facts from the log (schemas/books.py) into the money tables.

    project(db, events)                        every row of `events`, a batch per table
    positions(db, topic) -> {partition: Position}   how far the projection has taken the topic
    stamp(db, topic, partition, next_offset, halted='')

Idempotent by construction: every table a fact writes replaces rows of one key (migrations
0011, 0014, 0016, 0020, 0023, 0026) and a fact's rows carry every value they hold — times
included — so projecting the same fact twice leaves what projecting it once does. That is
what makes the projection at-least-once safe:

    1. the rows of a batch of facts are written, table by table, lines before their headers;
    2. only then is the position after the batch stamped in `books_positions`.

A projection that stops between 1 and 2 (kill -9, ClickHouse gone) writes the same rows
again from the stamped position next time; nothing is lost, nothing doubled.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Iterable

from schemas.books import BooksEvent, Row

__all__ = ["PROJECTED_TABLES", "Position", "halts", "positions", "project", "stamp"]

# The order in which a batch's tables are written: a document's lines before its header (the
# header is what readers go by), the journal after the headers it names.
PROJECTED_TABLES = (
    "tenants", "balance_ledger", "budgets", "api_keys", "rule_sets", "invoice_lines", "credit_note_lines",
    "invoice_parties", "invoice_terms", "invoices", "credit_notes", "payments", "payment_reversals", "allocations",
    "write_offs", "refunds", "invoice_journal", "billing_runs", "rerate_runs", "dunning_notices",
)


@dataclass(frozen=True)
class Position:
    next_offset: int
    halted: str = ""  # why the projection stopped at next_offset; '' while it runs


def project(db: Any, events: Iterable[BooksEvent]) -> int:
    """Write every row of `events` (one insert per table); returns the rows written."""
    by_table: dict[str, list[Row]] = defaultdict(list)
    for event in events:
        for row in event.fact.rows():
            by_table[row.TABLE].append(row)
    unknown = set(by_table) - set(PROJECTED_TABLES)
    if unknown:
        raise ValueError(f"facts name tables the projection does not write: {sorted(unknown)}")
    written = 0
    for table in PROJECTED_TABLES:
        rows = by_table.get(table)
        if rows:
            db.insert(table, [row.values() for row in rows], type(rows[0]).columns())
            written += len(rows)
    return written


def positions(db: Any, topic: str) -> dict[int, Position]:
    rows = db.query("SELECT partition, next_offset, halted FROM books_positions FINAL WHERE topic = {t:String}",
                    {"t": topic})
    return {int(p): Position(int(o), h) for p, o, h in rows}


def stamp(db: Any, topic: str, partition: int, next_offset: int, halted: str = "") -> None:
    """Say the projection has taken `topic`'s `partition` up to `next_offset` (exclusive); `halted`:
    it stopped there and why."""
    db.insert("books_positions", [(topic, partition, next_offset, halted, datetime.now(UTC))],
              ("topic", "partition", "next_offset", "halted", "projected_at"))


def halts(db: Any) -> list[tuple[str, int, int, str]]:
    """(topic, partition, offset, why) of each place the projection of the books stopped."""
    rows = db.query("SELECT topic, partition, next_offset, halted FROM books_positions FINAL WHERE halted != '' "
                    "ORDER BY topic, partition")
    return [(t, int(p), int(o), h) for t, p, o, h in rows]
