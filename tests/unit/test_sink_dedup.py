"""Idempotent inserts at the server (issue 40, part 5): a batch insert retried after its
acknowledgement was lost is stored once, on the real engine (chDB, migration 0031's window);
other content under the same offsets is stored; inserts without a token are never dropped.

The batch: cards G1 (partition 0) and G2 (partition 1), seconds T … T+2, a usage and a power
reading each, usage rented by acme. So 6 usage readings, 6 power readings, and 12 rated
seconds (6 rent rows, one per usage reading with a tenant; 6 energy rows, one per power
reading joined with its usage of the same card and second).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from datetime import UTC, datetime

import pytest

from billing_rules import DEFAULT_RULES_DIR, load_rules
from schemas.topics import TOPIC_POWER, TOPIC_USAGE
from streams.kafka.feeder import Batch
from streams.kafka.message import Message
from streams.kafka.positions import Positions
from streams.kafka.record_sets import RecordSet
from streams.rating.reference_batch import PythonRater
from streams.sink import ClickHouseSink, insert_token
from warehouse.connection import open_database
from warehouse.errors import DatabaseError

RULES = load_rules(DEFAULT_RULES_DIR)
T = 1_772_323_200  # 2026-03-01T00:00:00Z
NOW = datetime(2026, 3, 1, 1, 0, tzinfo=UTC)
TABLES = ("readings_usage", "readings_power", "rated_seconds")
ONCE = {"readings_usage": 6, "readings_power": 6, "rated_seconds": 12}  # see the module docstring


def iso(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def readings(power_w: int = 300) -> list[Message]:
    """Usage and power of G1 (partition 0) and G2 (partition 1) at T, T+1, T+2; offsets from 10."""
    out = []
    for partition, gpu in ((0, "G1"), (1, "G2")):
        for i in range(3):
            common = {"ts": iso(T + i), "site": "gz-guian", "node": "node-01", "gpu_uuid": gpu}
            usage = {"kind": "usage", "event_id": f"u-{gpu}-{i}", "gpu_model": "A800-80G", "tenant": "acme",
                     "instance": "i-acme", "util_pct": 50, "mem_used_mib": 1024, **common}
            power = {"kind": "power", "event_id": f"p-{gpu}-{i}", "power_w": power_w, **common}
            out.append(Message(TOPIC_USAGE, partition, 10 + i, gpu.encode(), json.dumps(usage).encode()))
            out.append(Message(TOPIC_POWER, partition, 20 + i, gpu.encode(), json.dumps(power).encode()))
    return out


def fed(messages: list[Message]) -> Batch:
    loop = asyncio.new_event_loop()
    try:
        return Batch(messages, loop.create_future())
    finally:
        loop.close()


def rated(batch: Batch):
    """The batch rated by a fresh rater, as after a restart (without look-ups: nothing is read back)."""
    return PythonRater(RULES).rate_batch(batch.take(), now=NOW)


class LostAcknowledgements:
    """A database whose first insert into each table is stored, then fails as a lost answer
    would (a timeout after ClickHouse wrote it): the sink cannot tell and retries it."""

    def __init__(self, database) -> None:
        self.database, self.failed = database, set()

    def __getattr__(self, name):
        return getattr(self.database, name)

    def _then_lose(self, table: str) -> None:
        if table not in self.failed:
            self.failed.add(table)
            raise DatabaseError(f"ClickHouse did not answer an insert into {table} (timed out)")

    def insert(self, table, rows, columns, *, token=None):
        self.database.insert(table, rows, columns, token=token)
        self._then_lose(table)

    def insert_native(self, table, columns, block, *, token=None):
        self.database.insert_native(table, columns, block, token=token)
        self._then_lose(table)


@pytest.fixture
def db(tmp_path):
    """A migrated database whose tables do not merge: a merge would fold duplicate rows of a
    ReplacingMergeTree and hide them from count() without FINAL."""
    with open_database(f"chdb://{tmp_path / 'ch'}") as database:
        for table in TABLES:
            database.command(f"SYSTEM STOP MERGES {table}")
        yield database


@pytest.fixture
def no_sleep(monkeypatch):
    monkeypatch.setattr("streams.sink.time.sleep", lambda s: None)


def counts(db, final: bool = False) -> dict[str, int]:
    return {t: db.query(f"SELECT count() FROM {t}{' FINAL' if final else ''}")[0][0] for t in TABLES}


def test_a_retried_batch_is_stored_once_without_final(db, no_sleep):
    batch = fed(readings())
    result = rated(batch)
    flaky = LostAcknowledgements(db)
    sink = ClickHouseSink(flaky, max_wait_s=60.0)
    sink.write(result.outcome, [], "", batch.source)
    assert flaky.failed == set(TABLES) and sink.stats.retries == 3  # each insert was stored, then retried
    assert counts(db) == ONCE  # count() without FINAL: the retries stored nothing
    sink.write(result.outcome, [], "", batch.source)  # the whole batch again, as after a crash before the commit
    assert counts(db) == ONCE


def test_other_content_under_the_same_positions_is_stored(db):
    first, second = fed(readings(power_w=300)), fed(readings(power_w=400))
    assert first.source == second.source
    sink = ClickHouseSink(db, max_wait_s=0)
    sink.write(rated(first).outcome, [], "", first.source)
    sink.write(rated(second).outcome, [], "", second.source)  # re-rated after a crash, into other rows
    # usage: the same bytes, stored once; power and the rated seconds (6 energy rows changed with
    # it, and the rent rows travel in the same block): the whole second block stored too
    assert counts(db) == {"readings_usage": 6, "readings_power": 12, "rated_seconds": 24}
    # the ReplacingMergeTree keys decide between the two, as without tokens: one row per key
    assert counts(db, final=True) == ONCE
    assert db.query("SELECT DISTINCT power_mw FROM readings_power FINAL") in ([(300_000,)], [(400_000,)])


def test_inserts_without_a_token_are_never_dropped(db):
    """Only the sink's tokened inserts are deduplicated: the same rows inserted twice plainly
    are stored twice, and rows deleted and inserted again come back."""
    batch = fed(readings())
    outcome = rated(batch).outcome
    sink = ClickHouseSink(db, max_wait_s=0)
    sink.write(outcome)
    sink.write(outcome)
    assert counts(db) == {t: 2 * n for t, n in ONCE.items()}
    db.command("SYSTEM START MERGES readings_usage")  # a DELETE is a mutation: it waits for merges to run
    db.command("DELETE FROM readings_usage WHERE 1 SETTINGS lightweight_deletes_sync = 2")
    assert counts(db)["readings_usage"] == 0
    sink.write(outcome)
    assert counts(db)["readings_usage"] == 6


def test_an_insert_cut_into_blocks_is_stored_once_on_retry(db):
    """A Native payload of 4 blocks over 2 partitions (4 + 4 + 2 rows of numbers 0 … 9, odd and
    even numbers in different partitions): 10 rows once, whatever the cut."""
    db.command("CREATE TABLE cut (p UInt8, n UInt32) ENGINE = MergeTree PARTITION BY p ORDER BY n "
               "SETTINGS non_replicated_deduplication_window = 1000")
    payload = db.query_bytes("SELECT toUInt8(number % 2) AS p, toUInt32(number) AS n FROM numbers(10) "
                             "SETTINGS max_block_size = 4", fmt="Native")
    for _ in range(2):
        db.insert_native("cut", ("p", "n"), payload, token="cut:t/0/0-9:abc")
    assert db.query("SELECT count(), sum(n) FROM cut") == [(10, 45)]  # 0 + 1 + … + 9 = 45
    db.insert_native("cut", ("p", "n"), payload, token="cut:t/0/10-19:abc")  # other positions: stored
    assert db.query("SELECT count() FROM cut") == [(20,)]


def test_the_token_is_the_table_the_positions_and_a_digest_of_the_bytes():
    source = Positions((("gpu.power.v1", 0, 20, 22), ("gpu.usage.v1", 0, 10, 12)))
    block = (b"\x02\x03native bytes", 3)
    columns = ("gpu_uuid", "second")
    expected = hashlib.blake2b(b"gpu_uuid\x1fsecond\x00\x02\x03native bytes", digest_size=16).hexdigest()
    token = insert_token("readings_usage", source, block, columns)
    assert token == f"readings_usage:gpu.power.v1/0/20-22,gpu.usage.v1/0/10-12:{expected}"
    assert insert_token("readings_usage", source, (b"\x02\x03native bytes", 3), columns) == token  # deterministic
    assert insert_token("readings_usage", source, (b"\x02\x03native byteS", 3), columns) != token
    assert insert_token("readings_power", source, block, columns) != token
    other = Positions((("gpu.power.v1", 0, 20, 23), ("gpu.usage.v1", 0, 10, 12)))
    assert insert_token("readings_usage", other, block, columns) != token
    rows = [("gpu.usage.v1", 0, 7, 0)]
    assert insert_token("deadletters", source, rows, ("a",)) == insert_token("deadletters", source, list(rows), ("a",))


def test_the_positions_are_the_batch_offsets():
    """Record sets span their fetch (start … next offset − 1); messages their own offsets,
    merged per partition; sorted by topic and partition."""
    sets = [RecordSet(TOPIC_USAGE, 3, b"", 100, 140, True), RecordSet(TOPIC_USAGE, 1, b"", 7, 8, True)]
    messages = [Message(TOPIC_POWER, 1, offset, b"G", b"{}") for offset in (5, 7, 9)]
    batch = fed([*sets, *messages])
    batch.take()  # the rater takes the messages; the positions stay
    assert batch.source.spans == ((TOPIC_POWER, 1, 5, 9), (TOPIC_USAGE, 1, 7, 7), (TOPIC_USAGE, 3, 100, 139))
    assert str(batch.source) == f"{TOPIC_POWER}/1/5-9,{TOPIC_USAGE}/1/7-7,{TOPIC_USAGE}/3/100-139"
    assert batch.positions == {(TOPIC_USAGE, 3): 140, (TOPIC_USAGE, 1): 8, (TOPIC_POWER, 1): 10}


def test_the_sink_tables_keep_a_window_of_tokens(db):
    windows = dict(db.query(
        "SELECT name, extract(engine_full, 'non_replicated_deduplication_window = (\\\\d+)') FROM system.tables "
        "WHERE database = currentDatabase() AND name IN ('rated_seconds', 'readings_usage', 'readings_power', "
        "'conflicts', 'deadletters')"))
    assert windows == {t: "1000" for t in ("rated_seconds", "readings_usage", "readings_power", "conflicts",
                                           "deadletters")}
