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
and the worker exits the same way (streams/crash.py) instead of spinning for an hour. So is a
full disk (`warehouse.errors.DiskFull`): the worker stops with one line naming the path to free.

Idempotent at the server too. Every insert of a fed batch carries an `insert_deduplication_token`
(`insert_token`): `<table>:<positions>:<digest>` — the Kafka offsets the batch spans
(streams/kafka/positions.py) and a BLAKE2b digest of exactly the bytes (or rows) inserted. A retry
of an insert whose acknowledgement was lost (a timeout after ClickHouse wrote it, an error on the
way back) rebuilds the same token from the same bytes, and ClickHouse, which keeps the tokens of
each table's recent inserts (migration 0031), stores it once: no duplicate parts for merges or
FINAL to fold, and none in a `count()` without FINAL. ClickHouse cuts an insert into blocks and
deduplicates each under the token with `_0`, `_1` … appended: the same bytes under the same
pinned block settings (warehouse.connection.BLOCKING) are cut the same way, so a retry after an
insert that stored some of its blocks stores exactly the rest.

Why the digest, not the positions alone: after a crash the same offsets can be rated into
different rows — the rater's memory is gone and it reads back what ClickHouse holds — and a
token made of positions alone would make ClickHouse silently drop that different insert as a
repeat. With the digest, an identical retry is stored once and a different rating is stored,
and the ReplacingMergeTree keys decide between them, as without tokens. A batch with no
positions (tools, tests) is inserted without a token: deduplicated by nobody, as before.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass, field

from schemas import tables
from streams.kafka.positions import Positions
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

    def write(self, outcome: RatedBatch, deadletters: list[tuple] | None = None, revision: str = "",
              source: Positions | None = None) -> None:
        """Insert every row of the batch; returns only when ClickHouse acknowledged all.
        `revision`: the revision of the rules that priced it, stamped with its hours. `source`:
        the offsets the batch spans; with them every insert carries its token (`insert_token`).

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
                token = None if source is None else insert_token(table, source, rows, columns)
                self._insert_with_retry(table, rows, columns, outcome.hours if table == "rated_seconds" else (),
                                        revision, token)
                rows_written += rows[1] if isinstance(rows, tuple) else len(rows)
        self.stats.batches += 1
        self.stats.rows += rows_written
        self.stats.last_flush_s = time.monotonic() - started

    def _insert_with_retry(self, table: str, rows: "list[tuple] | tuple[bytes, int]", columns: tuple[str, ...],
                           hours: list[tuple[str, int]] | tuple = (), revision: str = "",
                           token: str | None = None) -> None:
        """Insert plain rows, or a (Native block, row count); retried with backoff while the error
        may pass (`DatabaseError.permanent` False), raised at once when it cannot. Rated rows'
        hours are stamped first, before each attempt (warehouse/writes.py). Every attempt carries
        the same `token` and the same bytes: ClickHouse stores a repeat of an acknowledged one once."""
        delay_s, waited_s = 0.5, 0.0
        while True:
            try:
                self.stamps.before_write(self.database, hours, revision)
                if isinstance(rows, tuple):
                    self.database.insert_native(table, columns, rows[0], token=token)
                else:
                    self.database.insert(table, rows, columns, token=token)
                return
            except DatabaseError as exc:
                if exc.permanent or waited_s >= self.max_wait_s:
                    raise
                self.stats.retries += 1
                log.warning("insert into %s failed, retrying in %.1fs: %s", table, delay_s, exc)
                time.sleep(delay_s)
                waited_s += delay_s
                delay_s = min(delay_s * 2, 15.0)


def insert_token(table: str, source: Positions, rows: "list[tuple] | tuple[bytes, int]",
                 columns: tuple[str, ...]) -> str:
    """The insert's deduplication token: `<table>:<positions>:<digest>`, the digest a 128-bit BLAKE2b
    of the columns and of exactly what is inserted — the Native block's bytes, or the plain rows'
    repr (conflicts and dead letters: few, and the same rows give the same text). The same batch
    and the same content give the same token; other content under the same positions (a batch
    rated again after a crash) gives another, and is stored (see the module docstring)."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update("\x1f".join(columns).encode())
    digest.update(b"\x00")
    digest.update(rows[0] if isinstance(rows, tuple) else repr(rows).encode())
    return f"{table}:{source}:{digest.hexdigest()}"
