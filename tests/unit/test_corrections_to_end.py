"""What takes the log of corrections to its end before money is planned (issue 36, item 3), on
real chDB: the read of gpu.corrections.v1 is the Kafka seam (`read_corrections`, replaced here by
the checked list it returns), the writes are real.

- corrections that are on the log but cannot be stored refuse the plan, naming how many
  (`sync_to_end`; the database refusing inserts: the `clickhouse-down` failpoint);
- a drain whose first sync failed tries once more at its end, and exits 1 when that fails too
  (`_CorrectionsSync.at_drain_end`, what run_worker's drain ends with);
- a worker reloads its corrections when the log grew, even when another command stored them
  (before: only when its own sync stored something, so a late reading in a span that `rerate`
  or `invoice run` had just taken in was rated uncorrected);
- the billing job takes the log first, and a log that cannot be read postpones the run
  (billing/scheduler.py `run_due`, with the shell's `take_corrections_to_end`).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

import billing.scheduler as scheduler_module
import streams.corrections_sync as corrections_sync
import streams.worker as worker
from gpubill.cli.processes import _before_billing
from gpubill.config import Settings
from streams.corrections_sync import sync_to_end, take_corrections
from streams.errors import CorrectionsNotSynced, KafkaUnreachable
from streams.kafka.admin import nothing_listens
from tests.ports import free_port
from tests.unit.test_corrections_sync import NOW_S, RULES, db, logged, reattribute, void  # noqa: F401 - db: fixture


@pytest.fixture()
def listening():
    """A port something listens on (no broker: the read is replaced), as "host:port"."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield f"127.0.0.1:{server.getsockname()[1]}"


def test_corrections_that_cannot_be_stored_refuse_naming_how_many(db, tmp_path, monkeypatch, listening) -> None:  # noqa: F811
    stored_before = [logged(0, 0, reattribute("c-1"))]
    take_corrections(db, stored_before, NOW_S)
    on_log = [*stored_before, logged(0, 1, reattribute("c-1"), "duplicate"), logged(0, 2, void("c-2")),
              logged(1, 0, void("c-3", gpu="G2"))]
    monkeypatch.setattr(corrections_sync, "read_corrections", lambda settings, now_s: on_log)
    (tmp_path / "faults" / "clickhouse-down").parent.mkdir()
    (tmp_path / "faults" / "clickhouse-down").touch()  # inserts fail, queries are served
    monkeypatch.setenv("GPUBILL_FAILPOINTS", str(tmp_path / "faults"))

    with pytest.raises(CorrectionsNotSynced) as refused:
        sync_to_end(db, SimpleNamespace(kafka=listening), NOW_S, before="rerate 2026-03")

    # 4 messages: c-1 stored before, its duplicate counts nowhere, c-2 and c-3 not stored
    assert str(refused.value) == (
        "rerate 2026-03 refused: 2 of the 4 messages on gpu.corrections.v1 are not stored and could not be "
        "(ClickHouse unavailable (failpoint clickhouse-down)); run `gpubill corrections sync` once the database "
        "takes writes")
    assert db.query("SELECT event_id FROM corrections") == [("c-1",)]


def _pipeline(database, reloads: list) -> SimpleNamespace:
    return SimpleNamespace(writer=ThreadPoolExecutor(1), sink=SimpleNamespace(database=database),
                           reload_corrections=lambda: reloads.append(1))


@pytest.mark.parametrize("failures, expected", [(1, True), (2, False)])
def test_a_drain_whose_first_sync_failed_tries_once_more_then_fails(db, monkeypatch, failures, expected) -> None:  # noqa: F811
    reads = []

    def read(settings, now_s):
        reads.append(now_s)
        if len(reads) <= failures:
            raise KafkaUnreachable("127.0.0.1:9", "connection refused")
        return [logged(0, 0, reattribute("c-1"))]

    monkeypatch.setattr(worker, "read_corrections", read)
    sync = worker._CorrectionsSync(SimpleNamespace(kafka="127.0.0.1:9"), _pipeline(db, []))

    async def drain() -> bool:
        await sync.sync()  # the sync at start: fails
        return await sync.at_drain_end()

    # one failure: the retry at the end stores c-1 (exit 0); two: the drain exits 1, after one retry only
    assert (asyncio.run(drain()), len(reads)) == (expected, 2)
    assert db.query("SELECT event_id FROM corrections") == ([("c-1",)] if expected else [])


def test_a_worker_reloads_corrections_another_command_stored(db, monkeypatch) -> None:  # noqa: F811
    on_log = [logged(0, 0, reattribute("c-1"))]
    monkeypatch.setattr(worker, "read_corrections", lambda settings, now_s: on_log)
    reloads: list = []
    sync = worker._CorrectionsSync(SimpleNamespace(kafka="127.0.0.1:9"), _pipeline(db, reloads))
    asyncio.run(sync.sync())
    assert len(reloads) == 1
    asyncio.run(sync.sync())  # the log as it was: nothing to reload
    assert len(reloads) == 1

    on_log.append(logged(0, 1, void("c-2")))
    take_corrections(db, on_log, NOW_S)  # `invoice run` (or rerate, audit …) took it in first
    asyncio.run(sync.sync())
    assert len(reloads) == 2, "the worker kept rating with the corrections it had"


def test_nothing_listens_only_where_every_address_refuses(listening) -> None:
    closed = f"127.0.0.1:{free_port()}"
    assert nothing_listens(closed)
    assert not nothing_listens(listening)
    assert not nothing_listens(f"{closed},{listening}")  # one broker of two answers: the client decides
    assert not nothing_listens("no-such-host.invalid:9092")  # a name that does not resolve: not definite


class _Due:
    """A database where 2026-03 has rated data and no billing run."""

    def query(self, sql: str, parameters=None) -> list[tuple]:
        return [("2026-03",)] if "rated_writes" in sql else []


NOW = datetime(2026, 5, 1, tzinfo=UTC)


def test_the_billing_job_takes_the_log_first_and_postpones_when_it_cannot(monkeypatch, caplog) -> None:
    runs: list[str] = []
    monkeypatch.setattr(scheduler_module, "run_period",
                        lambda db, rules, period, **_: runs.append(period) or SimpleNamespace(
                            drafted=[], refreshed=[], unchanged=[], created=[], existing=[]))

    assert scheduler_module.run_due(_Due(), RULES, NOW, take_corrections=lambda: runs.append("synced")) != []
    assert runs == ["synced", "2026-03"]

    runs.clear()
    caplog.clear()  # the first run's INFO line
    closed = Settings(kafka=f"127.0.0.1:{free_port()}")  # the shell's sync, nothing listening
    with caplog.at_level(logging.WARNING, logger="gpubill.scheduler"):
        assert scheduler_module.run_due(_Due(), RULES, NOW, take_corrections=_before_billing(closed, _Due())) == []
    assert runs == []  # nothing invoiced without the corrections
    (said,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert said.startswith("billing run 2026-03 postponed to the next hour: the billing run refused: the log of "
                           "corrections (gpu.corrections.v1) cannot be read"), said

    nothing_due = SimpleNamespace(query=lambda sql, parameters=None: [])
    assert scheduler_module.run_due(nothing_due, RULES, NOW, take_corrections=lambda: runs.append("synced")) == []
    assert runs == []  # no period due: the log is not read
