"""Write a batch of rows to ClickHouse, then (and only then) let its offsets be committed.

Flush, in steps (after OpenMeter's sink):

1. Insert the batch's rows, table by table. Every table is a ReplacingMergeTree whose key
   is derived from the input alone (Kafka position, or stream/gpu/second with a version
   that only grows with information), so inserting the same batch twice leaves the same
   rows: a crash between step 1 and step 2 costs a re-insert, never a double count.
2. Return. The agent marks the batch done and the feeder commits its offsets after it
   (streams/feeder.py): at-least-once delivery plus idempotent writes = effectively once.

If ClickHouse does not acknowledge, the sink retries with backoff and the batch is not
done; when it gives up (drain mode), the process exits at once without committing, which
is the same as a crash before step 2.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from gpubill.errors import DatabaseError
from schemas import tables
from streams import native
from streams.rating import Outcome

if TYPE_CHECKING:
    from streams.native_rating import EncodedOutcome

log = logging.getLogger("gpubill.sink")


# The three tables written for every reading go as hand-encoded Native blocks (≈ 8× less
# CPU than the client's generic insert); conflicts and dead letters are rare and go plainly.
NATIVE_TABLES = {
    "readings_usage": native.Table("readings_usage", [
        native.string("event_id"), native.repeated_string("ts"), native.integers("second", "DateTime('UTC')"),
        native.repeated_string("site"), native.repeated_string("node"), native.repeated_string("gpu_uuid"),
        native.repeated_string("gpu_model"), native.nullable_string("tenant"), native.nullable_string("instance"),
        native.decimal("util_pct", 9, 4), native.integers("mem_used_mib", "UInt64"),
        native.integers("src_partition", "UInt32"), native.integers("src_offset", "UInt64"),
        native.timestamp_ms("ingested_at"),
    ]),
    "readings_power": native.Table("readings_power", [
        native.string("event_id"), native.repeated_string("ts"), native.integers("second", "DateTime('UTC')"),
        native.repeated_string("site"), native.repeated_string("node"), native.repeated_string("gpu_uuid"),
        native.integers("power_mw", "UInt64"), native.integers("src_partition", "UInt32"),
        native.integers("src_offset", "UInt64"), native.timestamp_ms("ingested_at"),
    ]),
    "rated_seconds": native.Table("rated_seconds", [
        native.enum8("stream", {"rent": 1, "energy": 2}), native.repeated_string("gpu_uuid"),
        native.integers("second", "DateTime('UTC')"), native.repeated_string("period"),
        native.repeated_string("tenant"), native.repeated_string("instance"), native.repeated_string("gpu_model"),
        native.repeated_string("site"), native.repeated_string("node"), native.repeated_string("plan"),
        native.decimal("rent_price", 18, 6), native.integers("rent_per_s", "UInt32"),
        native.decimal("discount_pct", 9, 4), native.decimal("util_pct", 9, 4),
        native.integers("energy_mj", "UInt64"), native.repeated_string("band"),
        native.decimal("tariff_per_kwh", 18, 6), native.decimal("pue", 9, 4), native.integers("version", "UInt64"),
        native.integers("src_partition", "UInt32"), native.integers("src_offset", "UInt64"),
        native.timestamp_ms("rated_at"),
    ]),
}


# Each table's ORDER BY, as positions in its rows (stream 'rent' sorts before 'energy').
_SORT_KEYS = {
    "readings_usage": lambda row: (row[5], row[2], row[11], row[12]),
    "readings_power": lambda row: (row[5], row[2], row[7], row[8]),
    "rated_seconds": lambda row: (row[0] == "energy", row[1], row[2]),
}


def encode_outcome(outcome: Outcome) -> dict[str, tuple[bytes, int]]:
    """The Native blocks of an `Outcome`'s hot tables, {table: (block, rows)}, each block's
    rows in its table's ORDER BY order: ClickHouse then finds the block sorted and skips
    sorting it (the Rust core encodes the same blocks, byte for byte)."""
    return {table: (NATIVE_TABLES[table].block(sorted(rows, key=_SORT_KEYS[table])), len(rows)) for table, rows in (
        ("rated_seconds", outcome.rated), ("readings_usage", outcome.readings_usage),
        ("readings_power", outcome.readings_power)) if rows}


@dataclass
class SinkStats:
    batches: int = 0
    rows: int = 0
    last_flush_s: float = 0.0
    retries: int = 0


@dataclass
class ClickHouseSink:
    """Writes `Outcome`s and dead letters through a `gpubill.clickhouse.Database`."""

    database: object
    max_wait_s: float = 600.0
    stats: SinkStats = field(default_factory=SinkStats)

    def write(self, outcome: "Outcome | EncodedOutcome", deadletters: list[tuple] | None = None) -> None:
        """Insert every row of the batch; returns only when ClickHouse acknowledged all.

        The three hot tables go as Native blocks: encoded here from an `Outcome`'s rows, or
        already encoded by the Rust core (`EncodedOutcome.blocks`)."""
        blocks = getattr(outcome, "blocks", None)
        if blocks is None:
            blocks = encode_outcome(outcome)
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
                self._insert_with_retry(table, rows, columns)
                rows_written += rows[1] if isinstance(rows, tuple) else len(rows)
        self.stats.batches += 1
        self.stats.rows += rows_written
        self.stats.last_flush_s = time.monotonic() - started

    def _insert_with_retry(self, table: str, rows: "list[tuple] | tuple[bytes, int]", columns: tuple[str, ...]) -> None:
        """Insert plain rows, or a (Native block, row count); retried with backoff."""
        delay_s, waited_s = 0.5, 0.0
        while True:
            try:
                if isinstance(rows, tuple):
                    self.database.insert_native(table, columns, rows[0])
                else:
                    self.database.insert(table, rows, columns)
                return
            except DatabaseError as exc:
                if waited_s >= self.max_wait_s:
                    raise
                self.stats.retries += 1
                log.warning("insert into %s failed, retrying in %.1fs: %s", table, delay_s, exc)
                time.sleep(delay_s)
                waited_s += delay_s
                delay_s = min(delay_s * 2, 15.0)


_USAGE_LOOKUP_SQL = """
SELECT gpu_uuid, toUnixTimestamp(second) AS s,
       argMin(event_id, (src_partition, src_offset)), argMin(tenant, (src_partition, src_offset)),
       argMin(instance, (src_partition, src_offset)), argMin(gpu_model, (src_partition, src_offset)),
       min(src_offset)
FROM readings_usage
WHERE gpu_uuid IN {gpus:Array(String)} AND second BETWEEN {lo:UInt32} AND {hi:UInt32} {exact}
GROUP BY gpu_uuid, s
"""
_POWER_LOOKUP_SQL = """
SELECT gpu_uuid, toUnixTimestamp(second) AS s,
       argMin(event_id, (src_partition, src_offset)), argMin(site, (src_partition, src_offset)),
       argMin(node, (src_partition, src_offset)), argMin(power_mw, (src_partition, src_offset)),
       argMin(src_partition, (src_partition, src_offset)), min(src_offset)
FROM readings_power
WHERE gpu_uuid IN {gpus:Array(String)} AND second BETWEEN {lo:UInt32} AND {hi:UInt32} {exact}
GROUP BY gpu_uuid, s
"""
_KEPT_SQL = """
SELECT gpu_uuid, toUnixTimestamp(second) AS s, argMin(event_id, (src_partition, src_offset))
FROM {table}
WHERE gpu_uuid IN {gpus:Array(String)} AND second BETWEEN {lo:UInt32} AND {hi:UInt32} {exact}
GROUP BY gpu_uuid, s
"""
_EXACT_KEYS = "AND (gpu_uuid, toUnixTimestamp(second)) IN {keys:Array(Tuple(String, UInt32))}"
# Keys spanning at most this many seconds are fetched as a (cards × seconds) range and
# filtered here: binding thousands of (card, second) pairs into the SQL costs more.
_RANGE_S = 3600


# Both streams in one query: one round trip per batch with new cards.
_STORED_SINCE_SQL = """
SELECT 'usage', gpu_uuid, toUnixTimestamp(max(second)) FROM readings_usage
WHERE gpu_uuid IN {usage_gpus:Array(String)} AND second >= {usage_lo:UInt32} GROUP BY gpu_uuid
UNION ALL
SELECT 'power', gpu_uuid, toUnixTimestamp(max(second)) FROM readings_power
WHERE gpu_uuid IN {power_gpus:Array(String)} AND second >= {power_lo:UInt32} GROUP BY gpu_uuid
"""


class StoredLookup:
    """A `streams.pipeline.Lookup` reading the first stored reading per (gpu, second)."""

    def __init__(self, database, before_read: Callable[[], None] = lambda: None) -> None:
        self.database = database
        self.before_read = before_read  # e.g. wait for the writes in flight (streams/app.py)

    def __call__(self, need_usage: set, need_power: set) -> tuple[list[tuple], list[tuple]]:
        self.before_read()
        return (_query_keys(self.database, _USAGE_LOOKUP_SQL, need_usage),
                _query_keys(self.database, _POWER_LOOKUP_SQL, need_power))

    def kept_event_ids(self, stream: str, keys: set[tuple[str, int]]) -> dict[tuple[str, int], str]:
        """The event id of the stored reading that counts for each (gpu, second) of `stream`
        (the first in partition order): the kept side of a conflict the Rust core found
        with a reading of an earlier batch, whose id it does not hold."""
        if not keys:
            return {}
        self.before_read()
        rows = _query_keys(self.database, _KEPT_SQL.replace("{table}", f"readings_{stream}"), keys)
        return {(gpu, int(second)): event_id for gpu, second, event_id in rows}

    def stored_since(self, cards: dict[str, dict[str, int]]) -> dict[str, set[str]]:
        """Per stream, the cards of `cards` ({stream: {gpu: since}}) with a stored reading at
        or after their `since` (see Rater.unchecked_cards)."""
        asked = {stream: since for stream, since in cards.items() if since}
        if not asked:
            return {}
        params: dict[str, object] = {}
        for stream in ("usage", "power"):
            since = asked.get(stream, {})
            params |= {f"{stream}_gpus": sorted(since), f"{stream}_lo": max(min(since.values(), default=0), 0)}
        self.before_read()
        held: dict[str, set[str]] = {stream: set() for stream in asked}
        for stream, gpu, newest in self.database.query(_STORED_SINCE_SQL, params):
            if int(newest) >= asked[stream][gpu]:
                held[stream].add(gpu)
        return held


def _query_keys(database, sql: str, keys: set) -> list[tuple]:
    if not keys:
        return []
    seconds = [second for _, second in keys]
    lo, hi = min(seconds), max(seconds)
    params = {"gpus": sorted({gpu for gpu, _ in keys}), "lo": lo, "hi": hi}
    if hi - lo <= _RANGE_S:
        rows = database.query(sql.replace("{exact}", ""), params)
        return [row for row in rows if (row[0], int(row[1])) in keys]
    return database.query(sql.replace("{exact}", _EXACT_KEYS), params | {"keys": sorted(keys)})
