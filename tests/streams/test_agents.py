"""The Faust agents through `agent.test_context()`: no broker, no ClickHouse (sink=None).

Notes on Faust's test wrapper (faust/agents/agent.py, AgentTestWrapper):
- `put(value, wait=True)` returns when the agent has yielded once; `rate_readings` batches
  with `take_events(..., within=0.5)`, so each waiting put takes about half a second and
  yields one BatchResult. `agent.results` is keyed by the count of yielded values (0, 1, …),
  not by Kafka offsets.
- `put` builds the message with the agent's topic name, and `rate_readings` reads two
  topics, so those messages carry topic "<internal>" (no topic → no kind check). To test
  the topic-based kind check, `deliver` puts events carrying a real topic name into the
  wrapper's channel.
- `_send_deadletters` is replaced by a recorder: with sink=None nothing reaches ClickHouse,
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
from faust.types import Message as FaustMessage

import streams.app as app_module
from billing_rules import DEFAULT_RULES_DIR, load_rules
from gpubill.config import TOPIC_DEADLETTER, TOPIC_POWER, TOPIC_USAGE, Settings
from schemas.tables import RATED_SECONDS
from streams.app import Pipeline, build_app
from streams.pipeline import BatchResult, DeadLetter
from streams.rating import Rater

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
    pipe = Pipeline(rules=RULES, sink=None, rater=Rater(RULES))
    yield pipe
    pipe.executor.shutdown(wait=True)


def agents(pipe: Pipeline):
    # Port 9 (discard) on loopback: if anything did try the broker, it would fail, not publish.
    app = build_app(Settings(kafka="127.0.0.1:9", metrics_port=0), pipe)
    rate_readings, store_deadletters = app.gpubill_agents
    return rate_readings, store_deadletters


async def results_after(agent, count: int, timeout_s: float = 10.0) -> dict[int, Any]:
    """Wait until the agent has yielded `count` values."""
    deadline = time.monotonic() + timeout_s
    while len(agent.results) < count:
        assert time.monotonic() < deadline, f"agent yielded {len(agent.results)} of {count}"
        await asyncio.sleep(0.05)
    return agent.results


async def deliver(agent, topic: str, partition: int, offset: int, value: bytes, key: bytes = b"G1") -> None:
    """Put an event that carries a real topic name, partition and offset into the agent's channel."""
    channel = agent.stream().channel
    message = FaustMessage(
        topic=topic, partition=partition, offset=offset, timestamp=time.time(), timestamp_type=0,
        headers=[], key=key, value=value, checksum=None,
        generation_id=agent.app.consumer_generation_id,  # else the stream skips it as stale
    )
    await channel.put(await channel.decode(message))


def test_rate_readings_yields_a_batch_result_per_put(pipeline, sent) -> None:
    rate_readings, _ = agents(pipeline)

    async def scenario() -> dict[int, BatchResult]:
        async with rate_readings.test_context() as agent:
            await agent.put(power_bytes("p-1", 300), key=b"G1")
            await agent.put(usage_bytes("u-1"), key=b"G1")
            return dict(agent.results)

    results = asyncio.run(scenario())
    assert sorted(results) == [0, 1]
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
    # the pipeline records how far each (topic, partition) got: offsets 0 and 1 → 2
    assert sum(pipeline.positions.values()) == 2


def test_rate_readings_batches_what_arrives_within_the_window(pipeline, sent) -> None:
    rate_readings, _ = agents(pipeline)

    async def scenario() -> dict[int, BatchResult]:
        async with rate_readings.test_context() as agent:
            await agent.put(usage_bytes("u-1"), key=b"G1", wait=False)
            await agent.put(power_bytes("p-1", 250), key=b"G1", wait=False)
            await agent.put(power_bytes("p-1", 250), key=b"G1", wait=False)  # a redelivery
            await agent.put(b"{broken", key=b"G1", wait=False)
            return dict(await results_after(agent, 1))

    results = asyncio.run(scenario())
    assert len(results) == 1  # all four within 0.5 s: one batch
    result = results[0]
    assert result.outcome.duplicates == 1
    assert sorted((r["stream"], r["tenant"], r["energy_mj"]) for r in rows(result)) == [
        ("energy", "tenant-x", 250_000), ("rent", "tenant-x", 0),
    ]
    assert [(d.message.offset, d.reason.split(":")[0]) for d in result.deadletters] == [(3, "not JSON")]
    assert [d.message.value for d in sent] == [b"{broken"]
    assert sum(result.readings_in.values()) == 4


def test_rate_readings_checks_the_kind_against_the_topic(pipeline, sent) -> None:
    rate_readings, _ = agents(pipeline)

    async def scenario() -> dict[int, BatchResult]:
        async with rate_readings.test_context() as agent:
            await deliver(agent, TOPIC_USAGE, 2, 40, usage_bytes("u-1"))
            await deliver(agent, TOPIC_POWER, 2, 17, usage_bytes("u-2", gpu="G2"))  # wrong topic
            await deliver(agent, TOPIC_POWER, 2, 18, power_bytes("p-1"))
            return dict(await results_after(agent, 1))

    result = asyncio.run(scenario())[0]
    assert [(d.message.topic, d.message.offset, d.reason) for d in result.deadletters] == [
        (TOPIC_POWER, 17, "kind: a usage reading on the power topic"),
    ]
    assert [(d.message.topic, d.message.partition, d.message.offset) for d in sent] == [(TOPIC_POWER, 2, 17)]
    assert result.positions == {(TOPIC_USAGE, 2): 41, (TOPIC_POWER, 2): 19}
    assert pipeline.positions == {(TOPIC_USAGE, 2): 41, (TOPIC_POWER, 2): 19}
    energy = [r for r in rows(result) if r["stream"] == "energy"]
    assert [(r["tenant"], r["src_partition"], r["src_offset"]) for r in energy] == [("tenant-x", 2, 18)]


def test_store_deadletters_counts_and_records_positions(pipeline) -> None:
    _, store_deadletters = agents(pipeline)

    async def scenario() -> dict[int, int]:
        async with store_deadletters.test_context() as agent:
            await agent.put(b"not json", key=b"G1", headers=[("gpubill-reason", b"not JSON: x")])
            return dict(agent.results)

    assert asyncio.run(scenario()) == {0: 1}
    # a single-topic agent: test_context names the real topic
    assert pipeline.positions == {(TOPIC_DEADLETTER, 0): 1}
