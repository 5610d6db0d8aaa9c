"""A full disk is its own error (issue 40, part 6): `DiskFull`, never retried, naming the path;
the worker stops through the crash path with one line saying where to free space."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime

import clickhouse_connect.driver.exceptions as ch
import pytest

import streams.pipeline as pipeline_module
from billing_rules import DEFAULT_RULES_DIR, load_rules
from streams.deadletters import deadletter_row_from_record
from streams.kafka.message import Message
from streams.pipeline import Pipeline
from streams.rating.protocol import EncodedOutcome
from streams.rating.reference_batch import PythonRater
from streams.sink import ClickHouseSink
from warehouse.connection import open_database, refused
from tests.tmpfs import tmpfs
from warehouse.errors import DatabaseError, DiskFull

NOW = datetime(2026, 3, 1, 1, 0, tzinfo=UTC)


@pytest.mark.parametrize("error, path", [
    # what chDB 26.9 says when a part's space cannot be reserved (seen on a full tmpfs, below)
    (ch.DatabaseError("Code: 243. DB::Exception: Cannot reserve 1.00 MiB, not enough space. (NOT_ENOUGH_SPACE)",
                      code=243), "/srv/ch"),
    # a write that met ENOSPC, under the code ClickHouse wrapped it in: the file named wins
    (ch.DatabaseError("Code: 75. DB::Exception: Cannot write to file /var/lib/clickhouse/store/a1/tmp_insert/"
                      "data.bin, errno: 28, strerror: No space left on device. (CANNOT_WRITE_TO_FILE_DESCRIPTOR)",
                      code=75), "/var/lib/clickhouse/store/a1/tmp_insert/data.bin"),
    (ch.DatabaseError("Code: 1001. DB::Exception: std::exception. Code: 1001, type: std::__1::system_error, e.what() "
                      "= No space left on device"), "/srv/ch"),
])
def test_a_full_disk_is_disk_full_naming_the_path(error, path):
    translated = refused(error, "ClickHouse refused an insert into rated_seconds: …", where="/srv/ch")
    assert isinstance(translated, DiskFull) and isinstance(translated, DatabaseError)
    assert translated.permanent is True and translated.path == path
    assert f"no space left on {path}" in str(translated) and "\n" not in str(translated)


def test_other_errors_are_not_disk_full():
    for error in (ch.DatabaseError("Code: 252. DB::Exception: Too many parts (300). (TOO_MANY_PARTS)", code=252),
                  ch.OperationalError("Error HTTPConnectionPool: Connection refused")):
        assert not isinstance(refused(error, "…", where="/srv/ch"), DiskFull)


@pytest.fixture
def small_disk(tmp_path):
    with tmpfs(tmp_path / "small", "24m") as disk:
        yield disk


def test_chdb_on_a_full_tmpfs_raises_disk_full_at_once_and_the_worker_stops_naming_it(small_disk, monkeypatch):
    """The real engine on a 24 MiB tmpfs, filled up to the last 512 KiB by a file beside it: the
    sink's insert fails with DiskFull (no retry: time.sleep never called) naming the directory,
    and the writer thread's failure ends in crash("disk-full") with one line saying what to do."""
    sleeps: list[float] = []
    monkeypatch.setattr("streams.sink.time.sleep", sleeps.append)
    crashed: list[tuple[str, str, bool]] = []

    class Crashed(BaseException):
        pass

    def fake_crash(reason: str, message: str, *, with_exception: bool = True):
        crashed.append((reason, message, with_exception))
        raise Crashed

    monkeypatch.setattr(pipeline_module, "crash", fake_crash)
    directory = small_disk / "ch"
    with open_database(f"chdb://{directory}") as db:
        stats = os.statvfs(small_disk)
        with open(small_disk / "filler", "wb") as filler:
            filler.write(b"\0" * (stats.f_bavail * stats.f_frsize - 512 * 1024))
        rules = load_rules(DEFAULT_RULES_DIR)
        pipeline = Pipeline(rules=rules, sink=ClickHouseSink(db, max_wait_s=3600.0), rater=PythonRater(rules))
        rows = [deadletter_row_from_record(Message("gpu.usage.v1", 0, n, b"G1", b"not json"), NOW) for n in range(10)]
        with pytest.raises(DiskFull) as full:
            pipeline.sink.write(EncodedOutcome(), rows)
        assert full.value.path == str(directory) and full.value.code == 243 and sleeps == []

        async def store() -> None:
            await pipeline.in_writer_thread(pipeline.sink.write, EncodedOutcome(), rows)

        try:
            with pytest.raises(Crashed):
                asyncio.run(store())
        finally:
            pipeline.executor.shutdown(wait=True)
            pipeline.writer.shutdown(wait=True)
    ((reason, message, with_exception),) = crashed
    assert reason == "disk-full" and with_exception is False and "\n" not in message
    assert f"free space on {directory}, then restart the worker" in message
    assert "nothing after the last committed batch was committed" in message
