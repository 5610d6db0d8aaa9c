"""Write a batch of rows to ClickHouse, then (and only then) let its offsets be committed.

Flush, in steps (after OpenMeter's sink):

1. Insert the batch's rows, table by table. Every table is a ReplacingMergeTree whose key
   is derived from the input alone (Kafka position, or stream/gpu/second with a version
   that only grows with information), so inserting the same batch twice leaves the same
   rows: a crash between step 1 and step 2 costs a re-insert, never a double count.
2. Return. The agent marks the batch done and the feeder commits its offsets after it
   (streams/kafka/feeder.py): at-least-once delivery plus idempotent writes = effectively once.

If ClickHouse does not acknowledge, the sink retries with backoff and the batch is not
done; when it gives up (after `max_wait_s`), the process exits at once without committing,
which is the same as a crash before step 2. A refusal that no retry can pass — ClickHouse's
error code says so (`warehouse.errors.StatementRefused`: a syntax error, an unknown table or
column, a type mismatch, a value too large) — is not retried at all: it is raised at once,
and the worker exits the same way (streams/crash.py) instead of spinning for an hour.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from schemas import tables
from streams.rating.protocol import RatedBatch
from warehouse.errors import DatabaseError
from warehouse.writes import HourStamps

log = logging.getLogger("gpubill.sink")


@dataclass
class SinkStats:
    batches: int = 0
    rows: int = 0
    last_flush_s: float = 0.0
    retries: int = 0


@dataclass
class ClickHouseSink:
    """Writes rated batches and dead letters through a `warehouse.connection.Database`."""

    database: object
    max_wait_s: float = 600.0
    stats: SinkStats = field(default_factory=SinkStats)
    stamps: HourStamps = field(default_factory=HourStamps)

    def write(self, outcome: RatedBatch, deadletters: list[tuple] | None = None, revision: str = "") -> None:
        """Insert every row of the batch; returns only when ClickHouse acknowledged all.
        `revision`: the revision of the rules that priced it, stamped with its hours.

        The three hot tables go as the Native blocks the rater encoded (≈ 8× less CPU than
        the client's generic insert); conflicts and dead letters are rare and go plainly."""
        blocks = outcome.blocks
        # Rated rows first: a raw reading found in ClickHouse after a crash is taken as
        # already rated (see Rater.lookups), so its rated rows must never be missing.
        plan = [
            ("rated_seconds", blocks.get("rated_seconds"), tables.RATED_SECONDS),
            ("conflicts", outcome.conflicts, tables.CONFLICTS),
            ("deadletters", deadletters or [], tables.DEADLETTERS),
            ("readings_usage", blocks.get("readings_usage"), tables.READINGS_USAGE),
            ("readings_power", blocks.get("readings_power"), tables.READINGS_POWER),
        ]
        started = time.monotonic()
        rows_written = 0
        for table, rows, columns in plan:
            if rows:
                self._insert_with_retry(table, rows, columns, outcome.hours if table == "rated_seconds" else (),
                                        revision)
                rows_written += rows[1] if isinstance(rows, tuple) else len(rows)
        self.stats.batches += 1
        self.stats.rows += rows_written
        self.stats.last_flush_s = time.monotonic() - started

    def _insert_with_retry(self, table: str, rows: "list[tuple] | tuple[bytes, int]", columns: tuple[str, ...],
                           hours: list[tuple[str, int]] | tuple = (), revision: str = "") -> None:
        """Insert plain rows, or a (Native block, row count); retried with backoff while the error
        may pass (`DatabaseError.permanent` False), raised at once when it cannot. Rated rows'
        hours are stamped first, before each attempt (warehouse/writes.py)."""
        delay_s, waited_s = 0.5, 0.0
        while True:
            try:
                self.stamps.before_write(self.database, hours, revision)
                if isinstance(rows, tuple):
                    self.database.insert_native(table, columns, rows[0])
                else:
                    self.database.insert(table, rows, columns)
                return
            except DatabaseError as exc:
                if exc.permanent or waited_s >= self.max_wait_s:
                    raise
                self.stats.retries += 1
                log.warning("insert into %s failed, retrying in %.1fs: %s", table, delay_s, exc)
                time.sleep(delay_s)
                waited_s += delay_s
                delay_s = min(delay_s * 2, 15.0)
