"""Permanent and transient ClickHouse errors (issue 22, item 4.4): decided at the warehouse
boundary from ClickHouse's error code; the sink retries only what a retry can pass, and a
permanent refusal stops the worker through the crash path with its batch uncommitted."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime

import pytest
from clickhouse_connect.driver import exceptions as ch

import streams.pipeline as pipeline_module
from billing_rules import DEFAULT_RULES_DIR, load_rules
from streams.deadletters import deadletter_row_from_record
from streams.kafka.message import Message
from streams.pipeline import Pipeline
from streams.rating.protocol import EncodedOutcome
from streams.rating.reference_batch import PythonRater
from streams.sink import ClickHouseSink
from warehouse.connection import error_code, open_database, refused
from warehouse.errors import PERMANENT_CODES, DatabaseError, StatementRefused

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
TRANSIENT = {241: "MEMORY_LIMIT_EXCEEDED", 252: "TOO_MANY_PARTS", 159: "TIMEOUT_EXCEEDED", 202: "TOO_MANY_SIMULTANEOUS_QUERIES",
             209: "SOCKET_TIMEOUT", 210: "NETWORK_ERROR", 999: "KEEPER_EXCEPTION", 242: "TABLE_IS_READ_ONLY"}


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    with open_database(f"chdb://{tmp_path_factory.mktemp('errors') / 'ch'}") as database:
        yield database


def letters(count: int = 1) -> list[tuple]:
    return [deadletter_row_from_record(Message("gpu.usage.v1", 0, offset, b"G1", b"not json"), NOW)
            for offset in range(count)]


# ------------------------------------------------------------ the warehouse decides


def test_the_permanent_codes_are_named_as_the_engine_names_them(db):
    codes = sorted(PERMANENT_CODES | TRANSIENT)
    names = db.query("SELECT " + ", ".join(f"errorCodeToName({code})" for code in codes))[0]
    assert dict(zip(codes, names)) == PERMANENT_CODES | TRANSIENT
    assert not set(TRANSIENT) & set(PERMANENT_CODES)  # memory, parts, timeouts, network: retried


@pytest.mark.parametrize("statement, code", [
    (lambda db: db.insert("no_such_table", [(1,)], ["x"]), 60),  # UNKNOWN_TABLE
    (lambda db: db.insert_native("deadletters", ["no_such_column"], b"\x01\x01\x0eno_such_column\x05UInt8\x01"),
     16),  # NO_SUCH_COLUMN_IN_TABLE
    (lambda db: db.query("SELEC 1"), 62),  # SYNTAX_ERROR
    (lambda db: db.command("SELECT toUInt8('x')"), 6),  # CANNOT_PARSE_TEXT
    (lambda db: db.query("SELECT 1 + 'a'"), 43),  # ILLEGAL_TYPE_OF_ARGUMENT
    (lambda db: db.insert("deadletters", [(1,)], ["no_such_column"]), None),  # refused by the client, before sending
])
def test_a_refusal_no_retry_can_pass_is_statement_refused(db, statement, code):
    with pytest.raises(StatementRefused) as refusal:
        statement(db)
    assert refusal.value.permanent is True and isinstance(refusal.value, DatabaseError)
    assert refusal.value.code == code
    assert "\n" not in str(refusal.value) and str(refusal.value).startswith("ClickHouse refused")


def test_an_unreachable_server_is_transient():
    with pytest.raises(DatabaseError) as unreachable:
        open_database("http://default:x@127.0.0.1:9/default", migrate=False)  # port 9: nothing answers
    assert unreachable.value.permanent is False and unreachable.value.code is None
    assert not isinstance(unreachable.value, StatementRefused)


@pytest.mark.parametrize("error, permanent", [
    (ch.DatabaseError("Code: 252. DB::Exception: Too many parts (300). (TOO_MANY_PARTS)", code=252), False),
    (ch.DatabaseError("Code: 241. DB::Exception: Memory limit exceeded. (MEMORY_LIMIT_EXCEEDED)", code=241), False),
    (ch.OperationalError("Error HTTPConnectionPool: Connection refused"), False),
    (ch.DatabaseError("Code: 62. DB::Exception: Syntax error"), True),  # no code attribute: read from the text
    (ch.DatabaseError("Code: 53. DB::Exception: Type mismatch. (TYPE_MISMATCH)", code=53), True),
    (ch.DatabaseError("Code: 12345. DB::Exception: something new"), False),  # unknown: retried as before
    (ch.ProgrammingError("Unrecognized column 'x' in table rated_seconds"), True),  # the client's own refusal
    (ch.DataError("Unable to create native array for column amount"), True),
    (ch.ProgrammingError("Attempt to execute concurrent queries within the same session."), False),
])
def test_the_code_decides(error, permanent):
    translated = refused(error, "ClickHouse refused an insert into rated_seconds: …")
    assert translated.permanent is permanent and isinstance(translated, StatementRefused) is permanent
    assert translated.code == error_code(error)


# ------------------------------------------------------------ the sink retries only the transient


@pytest.fixture
def sleeps(monkeypatch) -> list[float]:
    """The sink's backoff waits, shortened to nothing; more than 5 means it is spinning."""
    waits: list[float] = []

    def sleep(delay_s: float) -> None:
        waits.append(delay_s)
        if len(waits) > 5:
            raise AssertionError(f"the sink is still retrying after {waits}")

    monkeypatch.setattr("streams.sink.time.sleep", sleep)
    return waits


@pytest.fixture
def no_deadletters_table(db):
    """What a missing migration looks like to the sink (chDB: one engine per process, so the
    module's database, its table moved away and back)."""
    db.command("RENAME TABLE deadletters TO deadletters_away")
    yield db
    db.command("RENAME TABLE deadletters_away TO deadletters")


def test_a_permanent_refusal_is_raised_at_once_never_retried(no_deadletters_table, sleeps):
    sink = ClickHouseSink(no_deadletters_table, max_wait_s=3600.0)  # a running worker's: an hour of retries before
    started = time.monotonic()
    with pytest.raises(StatementRefused) as refusal:
        sink.write(EncodedOutcome(), letters())
    assert sleeps == [] and sink.stats.retries == 0 and sink.stats.batches == 0
    assert time.monotonic() - started < 5
    assert refusal.value.code == 60 and "deadletters" in str(refusal.value)


def test_a_transient_failure_is_retried_until_clickhouse_answers(db, tmp_path, monkeypatch):
    failpoints = tmp_path / "failpoints"
    failpoints.mkdir()
    monkeypatch.setenv("GPUBILL_FAILPOINTS", str(failpoints))
    db.command("TRUNCATE TABLE deadletters")
    (failpoints / "clickhouse-down").touch()
    # ClickHouse comes back during the backoff (0.5 s, then 1 s …): the same write then succeeds
    threading.Timer(1.0, (failpoints / "clickhouse-down").unlink).start()
    sink = ClickHouseSink(db, max_wait_s=3600.0)
    sink.write(EncodedOutcome(), letters(3))
    assert sink.stats.retries >= 1 and sink.stats.batches == 1
    assert db.query("SELECT count() FROM deadletters")[0][0] == 3


def test_a_transient_failure_past_max_wait_is_raised_as_transient(sleeps):
    class Down:
        def insert(self, *_, **__):
            raise DatabaseError("ClickHouse unavailable (failpoint clickhouse-down)")

    sink = ClickHouseSink(Down(), max_wait_s=1.0)
    with pytest.raises(DatabaseError) as gave_up:
        sink.write(EncodedOutcome(), letters())
    assert gave_up.value.permanent is False and sleeps == [0.5, 1.0] and sink.stats.retries == 2


# ------------------------------------------------------------ the worker stops, uncommitted


def test_a_permanent_refusal_stops_the_worker_through_the_crash_path_uncommitted(no_deadletters_table, monkeypatch,
                                                                               sleeps):
    """The writer thread's StatementRefused: one line, crash("clickhouse-refused"), and what would
    have marked the batch done (and let its offsets be committed) never runs."""
    crashed: list[tuple[str, str, bool]] = []

    class Crashed(BaseException):
        pass

    def fake_crash(reason: str, message: str, *, with_exception: bool = True):
        crashed.append((reason, message, with_exception))
        raise Crashed

    monkeypatch.setattr(pipeline_module, "crash", fake_crash)
    rules = load_rules(DEFAULT_RULES_DIR)
    sink = ClickHouseSink(no_deadletters_table, max_wait_s=3600.0)
    pipeline = Pipeline(rules=rules, sink=sink, rater=PythonRater(rules))
    marked_done: list[int] = []

    async def store_and_finish() -> None:  # streams/worker.py's store_deadletters, one batch
        await pipeline.in_writer_thread(pipeline.sink.write, EncodedOutcome(), letters())
        marked_done.append(1)  # batch.finish: only now may the feeder commit

    try:
        with pytest.raises(Crashed):
            asyncio.run(store_and_finish())
    finally:
        pipeline.executor.shutdown(wait=True)
        pipeline.writer.shutdown(wait=True)
    assert marked_done == [] and sleeps == []
    ((reason, message, with_exception),) = crashed
    assert reason == "clickhouse-refused" and with_exception is False
    assert "\n" not in message and "deadletters" in message and "code 60" in message
