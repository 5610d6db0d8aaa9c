"""The Faust agents through `agent.test_context()`: no broker, no ClickHouse (sink=None).

The agents read in-memory channels that the feeder fills with `Batch`es (streams/kafka/feeder.py):
`put(batch)` returns once the agent has yielded that batch's result (rated; it is written
while the next is rated), and once written the batch's
`done` future must then be resolved — the feeder commits offsets only behind it.
`_send_deadletters` is replaced by a recorder: with sink=None nothing reaches ClickHouse,
and the dead-letter producer must not reach a real broker from a unit test.

No tests/streams/__init__.py on purpose: it would make this folder a package named
`streams` and shadow the real one.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

import streams.worker as app_module
from billing_rules import DEFAULT_RULES_DIR, load_rules
from schemas.topics import TOPIC_DEADLETTER, TOPIC_POWER, TOPIC_USAGE
from gpubill.config import Settings
from schemas.tables import RATED_SECONDS
from streams.pipeline import Pipeline
from streams.worker import build_app
from streams.kafka.feeder import Batch
from streams.deadletters import DeadLetter
from streams.kafka.message import Message
from streams.rating.protocol import BatchResult
from streams.rating.reference_batch import PythonRater
from streams.lookup import StoredLookup

RULES = load_rules(DEFAULT_RULES_DIR)
# Real-clock based: the worker stamps `now` itself. One hour ago is never "future", and
# tenant-x rents on the hourly plan in every month: ¥10 / 3600 s for an A800-80G.
SECOND = int(time.time()) - 3600
TS = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(SECOND))


def usage_bytes(event_id: str, tenant: str | None = "tenant-x", gpu: str = "G1") -> bytes:
    return json.dumps({
        "kind": "usage", "event_id": event_id, "ts": TS, "site": "gz-guian", "node": "node-01", "gpu_uuid": gpu,
        "gpu_model": "A800-80G", "tenant": tenant, "instance": "i-1", "util_pct": 75, "mem_used_mib": 2048,
    }).encode()


def power_bytes(event_id: str, power_w: Any = 300, gpu: str = "G1") -> bytes:
    return json.dumps({
        "kind": "power", "event_id": event_id, "ts": TS, "site": "gz-guian", "node": "node-01", "gpu_uuid": gpu,
        "power_w": power_w,
    }).encode()


def rows(result: BatchResult) -> list[dict[str, Any]]:
    return [dict(zip(RATED_SECONDS, r)) for r in result.outcome.rated]


@pytest.fixture
def sent(monkeypatch) -> list[DeadLetter]:
    letters: list[DeadLetter] = []

    async def record(topic, result: BatchResult) -> None:
        assert topic.get_topic_name() == TOPIC_DEADLETTER
        letters.extend(result.deadletters)

    monkeypatch.setattr(app_module, "_send_deadletters", record)
    return letters


@pytest.fixture
def pipeline() -> Pipeline:
    pipe = Pipeline(rules=RULES, sink=None, rater=PythonRater(RULES))
    yield pipe
    pipe.executor.shutdown(wait=True)
    pipe.writer.shutdown(wait=True)


def agents(pipe: Pipeline):
    # Port 9 (discard) on loopback: if anything did try the broker, it would fail, not publish.
    app = build_app(Settings(kafka="127.0.0.1:9", metrics_port=0), pipe)
    rate_readings, store_deadletters = app.gpubill_agents
    return rate_readings, store_deadletters


def batch(*messages: tuple[str, int, int, bytes]) -> Batch:
    """A fed batch of (topic, partition, offset, value) messages keyed by card G1."""
    done = asyncio.get_running_loop().create_future()
    return Batch([Message(topic, partition, offset, b"G1", value) for topic, partition, offset, value in messages],
                 done)


async def written(*fed: Batch) -> None:
    """Wait until the batches are written and done: the agent yields a batch's result once
    it is rated, and writes it (then produces its dead letters) while rating the next."""
    await asyncio.wait_for(asyncio.gather(*(one.done for one in fed)), timeout=30)


def test_rate_readings_rates_a_batch_and_marks_it_done(pipeline, sent) -> None:
    rate_readings, _ = agents(pipeline)

    async def scenario() -> tuple[dict[int, BatchResult], list[Batch]]:
        async with rate_readings.test_context() as agent:
            fed = [batch((TOPIC_POWER, 0, 0, power_bytes("p-1", 300))), batch((TOPIC_USAGE, 0, 0, usage_bytes("u-1")))]
            for one in fed:
                await agent.put(one)
            await written(*fed)
            return dict(agent.results), fed

    results, fed = asyncio.run(scenario())
    assert sorted(results) == [0, 1]
    assert [one.done.result() for one in fed] == [results[0], results[1]]  # done: the feeder may commit
    first, second = results[0], results[1]
    assert isinstance(first, BatchResult) and first.deadletters == []
    (unjoined,) = rows(first)
    # 300 W for one second = 300 000 mJ, nobody's yet
    assert (unjoined["stream"], unjoined["tenant"], unjoined["energy_mj"], unjoined["second"]) == (
        "energy", "", 300_000, SECOND,
    )
    by_stream = {r["stream"]: r for r in rows(second)}
    assert sorted(by_stream) == ["energy", "rent"]
    rent = by_stream["rent"]
    assert (rent["tenant"], rent["plan"], rent["rent_price"], rent["rent_per_s"]) == ("tenant-x", "hourly", 10, 3600)
    joined = by_stream["energy"]
    assert (joined["tenant"], joined["energy_mj"]) == ("tenant-x", 300_000)
    assert joined["version"] > unjoined["version"]  # the late usage moves the energy to its tenant
    assert sent == []


def test_rate_readings_dedupes_and_deadletters_within_a_batch(pipeline, sent) -> None:
    rate_readings, _ = agents(pipeline)

    async def scenario() -> BatchResult:
        async with rate_readings.test_context() as agent:
            fed = batch(
                (TOPIC_USAGE, 1, 0, usage_bytes("u-1")),
                (TOPIC_POWER, 1, 0, power_bytes("p-1", 250)),
                (TOPIC_POWER, 1, 1, power_bytes("p-1", 250)),  # a redelivery
                (TOPIC_POWER, 1, 2, b"{broken"),
            )
            await agent.put(fed)
            await written(fed)
            return agent.results[0]

    result = asyncio.run(scenario())
    assert result.outcome.duplicates == 1
    assert sorted((r["stream"], r["tenant"], r["energy_mj"]) for r in rows(result)) == [
        ("energy", "tenant-x", 250_000), ("rent", "tenant-x", 0),
    ]
    assert [(d.message.offset, d.reason.split(":")[0]) for d in result.deadletters] == [(2, "not JSON")]
    assert [d.message.value for d in sent] == [b"{broken"]
    assert result.readings_in == {TOPIC_USAGE: 1, TOPIC_POWER: 3}
    assert result.positions == {(TOPIC_USAGE, 1): 1, (TOPIC_POWER, 1): 3}


def test_rate_readings_checks_the_kind_against_the_topic(pipeline, sent) -> None:
    rate_readings, _ = agents(pipeline)

    async def scenario() -> BatchResult:
        async with rate_readings.test_context() as agent:
            fed = batch(
                (TOPIC_USAGE, 2, 40, usage_bytes("u-1")),
                (TOPIC_POWER, 2, 17, usage_bytes("u-2", gpu="G2")),  # wrong topic
                (TOPIC_POWER, 2, 18, power_bytes("p-1")),
            )
            await agent.put(fed)
            await written(fed)
            return agent.results[0]

    result = asyncio.run(scenario())
    assert [(d.message.topic, d.message.offset, d.reason) for d in result.deadletters] == [
        (TOPIC_POWER, 17, "kind: a usage reading on the power topic"),
    ]
    assert [(d.message.topic, d.message.partition, d.message.offset) for d in sent] == [(TOPIC_POWER, 2, 17)]
    energy = [r for r in rows(result) if r["stream"] == "energy"]
    assert [(r["tenant"], r["src_partition"], r["src_offset"]) for r in energy] == [("tenant-x", 2, 18)]


def test_store_deadletters_counts_and_marks_done(pipeline) -> None:
    _, store_deadletters = agents(pipeline)

    async def scenario() -> tuple[dict[int, int], Batch]:
        async with store_deadletters.test_context() as agent:
            fed = batch((TOPIC_DEADLETTER, 0, 0, b"not json"), (TOPIC_DEADLETTER, 0, 1, b"nor this"))
            await agent.put(fed)
            return dict(agent.results), fed

    results, fed = asyncio.run(scenario())
    assert results == {0: 2} and fed.done.result() == 2


def test_a_clickhouse_lookup_waits_for_the_writes_handed_over_before_it(pipeline) -> None:
    """Batch n + 1 is rated while batch n is written: what rating asks ClickHouse must see
    batch n (Pipeline.writes_done, the look-up's `before_read`)."""
    events: list[str] = []

    class Database:
        def query(self, sql: str, parameters: dict) -> list:
            events.append("query")
            return []

    pipeline.writer.submit(lambda: (time.sleep(0.2), events.append("batch n written")))
    lookup = StoredLookup(Database(), before_read=pipeline.writes_done)
    assert lookup.stored_since({"usage": {"G1": SECOND}}) == {"usage": set()}
    assert lookup(set(), {("G1", SECOND)}) == ([], [])
    assert events == ["batch n written", "query", "query"]


def test_the_installed_faust_fits_the_worker() -> None:
    # The hooks streams/faust_app.py overrides and the consumer switch it turns off: a Faust
    # upgrade that drops one fails here, not in a customer's worker.
    from streams.faust_app import faust_self_check

    assert faust_self_check() == []


def test_the_worker_exports_whether_the_record_set_path_is_active() -> None:
    from prometheus_client import CollectorRegistry

    from streams.metrics import Metrics

    registry = CollectorRegistry()
    pipe = Pipeline(rules=RULES, sink=None, rater=PythonRater(RULES), metrics=Metrics(registry))
    try:
        build_app(Settings(kafka="127.0.0.1:9", metrics_port=0), pipe)
        # 1: the installed aiokafka fits streams/kafka/record_sets.py (see tests/unit/test_records.py)
        assert registry.get_sample_value("gpubill_fast_record_sets") == 1
    finally:
        pipe.executor.shutdown(wait=True)
        pipe.writer.shutdown(wait=True)
