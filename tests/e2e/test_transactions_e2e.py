"""Aborted Kafka transactions are not billed (issue 36, item 1), on the real broker and chDB.

gpubill's own producers use no transactions, but MirrorMaker 2, Kafka Connect and Flink's
exactly-once sinks abort and retry as a matter of course: every consumer of gpubill reads
committed records only. Here a real transactional producer (kafka-python's) writes, on the
partition of card GA1 (acme, A800-80G hourly: ¥3600/h = ¥1 per second, tests/e2e/rules):

    in order  what                                                        counts
    1         10 plain readings, 15:57:00–15:57:09Z (`gpubill replay`)     10 s
    2         60 readings 15:55:00–15:55:59Z in a transaction, aborted      —
    3         10 readings 15:56:00–15:56:09Z in a transaction, committed    10 s
    4         10 plain readings, 15:57:10–15:57:19Z                         10 s
    5         5 readings 15:54:00–15:54:04Z in a transaction, aborted       —
    6         5 readings 15:53:00–15:53:04Z in a transaction left open
              while `worker --drain` runs (it must end, before them), then aborted

(each transaction ends with the broker's marker). By hand: acme's March rent is 10 + 10 + 10
= 30 s × ¥1 = ¥30.00, 0.008333 h (30 / 3600); read uncommitted it was 30 + 60 + 5 + 5 = 100 s.

A correction produced in an aborted transaction (GA1's 15:57:00–15:57:10 to beta) is not
stored by `gpubill corrections sync`, nor read by `gpubill verify-log`; one committed in a
transaction is (a power void of a span with no power readings: it changes no figure).
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from fractions import Fraction
from types import SimpleNamespace

import pytest
from kafka import KafkaProducer

from streams.kafka.admin import group_offsets
from streams.kafka.logs import end_offsets
from tests.e2e.test_corrections_sync_e2e import correction
from tests.e2e.test_pipeline_e2e import fen, lines_by_kind

pytestmark = pytest.mark.e2e

USAGE, CORRECTIONS = "gpu.usage.v1", "gpu.corrections.v1"
START = datetime(2026, 3, 31, 15, 53, tzinfo=timezone.utc)


def reading(second: int, tag: str) -> dict:
    """GA1's usage reading at START + `second` s (acme's A800 at ¥1 per second)."""
    ts = (START + timedelta(seconds=second)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"kind": "usage", "event_id": f"GA1-tx-{tag}-{second}", "ts": ts, "site": "gz-guian", "node": "gz-n1",
            "gpu_uuid": "GA1", "gpu_model": "A800-80G", "tenant": "acme", "instance": "i-acme-1", "util_pct": 90,
            "mem_used_mib": 40960}


def transactional(broker, name: str) -> KafkaProducer:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"e2e-{name}",
                             transaction_timeout_ms=300_000)
    producer.init_transactions()
    producer.begin_transaction()
    return producer


def send(producer: KafkaProducer, topic: str, documents: list[dict]) -> list:
    """The documents sent, keyed by card and flushed (not committed); their RecordMetadata."""
    sent = [producer.send(topic, key=document["gpu_uuid"].encode(), value=json.dumps(document).encode())
            for document in documents]
    producer.flush(timeout=30)
    return [future.get(timeout=30) for future in sent]


def test_aborted_transactions_are_neither_billed_nor_stored_nor_replayed(gpubill, broker, tmp_path):
    from warehouse.connection import open_database

    # -- 1. the log of GA1's partition as in the module docstring (second 0 is 15:53:00Z)
    plain = tmp_path / "plain.ndjson"
    plain.write_text("".join(json.dumps(reading(240 + s, "plain")) + "\n" for s in range(10)))
    gpubill.run("replay", str(plain))  # creates the topics, 4 partitions
    aborted = transactional(broker, "aborted")
    send(aborted, USAGE, [reading(120 + s, "aborted") for s in range(60)])
    aborted.abort_transaction()
    committed = transactional(broker, "committed")
    send(committed, USAGE, [reading(180 + s, "committed") for s in range(10)])
    committed.commit_transaction()
    plain.write_text("".join(json.dumps(reading(250 + s, "plain")) + "\n" for s in range(10)))
    gpubill.run("replay", str(plain))
    aborted.begin_transaction()
    send(aborted, USAGE, [reading(60 + s, "aborted-tail") for s in range(5)])
    aborted.abort_transaction()
    aborted.close()
    committed.close()

    # -- 2. a drain with a transaction open on the same partition ends, before it: read
    #   committed, both clients' end offsets are the last stable offset, the open one's first
    still_open = transactional(broker, "open")
    first = send(still_open, USAGE, [reading(s, "open") for s in range(5)])[0]
    settings = SimpleNamespace(kafka=broker.bootstrap, group=broker.group, partitions=4)
    deadline = time.monotonic() + 30  # the markers of the transactions above are written asynchronously
    while True:
        ends = asyncio.run(end_offsets(broker.bootstrap, USAGE, {}, 4))  # aiokafka's
        if ends[first.partition] == first.offset or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert ends[first.partition] == first.offset  # the last stable offset, not the end of the log (+5)
    assert group_offsets(settings, [USAGE])[(USAGE, first.partition)][1] == first.offset  # kafka-python's: the drain's
    drained = gpubill.run("worker", "--drain", timeout=240)
    assert "drained:" in drained.stdout
    still_open.abort_transaction()
    still_open.close()
    with open_database(gpubill.env["GPUBILL_CLICKHOUSE"]) as db:
        assert db.query("SELECT count() FROM readings_usage FINAL WHERE gpu_uuid = 'GA1'") == [(30,)]

    # -- 3. corrections: one aborted, one committed, each in a transaction
    moved = correction("e2e-aborted-move", gpu="GA1", lo="2026-03-31T15:57:00Z", hi="2026-03-31T15:57:10Z")
    voided = correction("e2e-committed-void", gpu="GA1", lo="2026-03-31T15:50:00Z", hi="2026-03-31T15:51:00Z",
                        stream="power")
    producer = transactional(broker, "corrections")
    send(producer, CORRECTIONS, [moved])
    producer.abort_transaction()
    producer.begin_transaction()
    send(producer, CORRECTIONS, [voided])
    producer.commit_transaction()
    producer.close()
    synced = json.loads(gpubill.run("corrections", "sync", "--json").stdout)
    assert [row["event_id"] for row in synced["stored"]] == ["e2e-committed-void"]
    assert synced["read"] == 1 and synced["deadlettered"] == [] and synced["conflicts"] == []

    with open_database(gpubill.env["GPUBILL_CLICKHOUSE"]) as db:
        assert db.query("SELECT event_id FROM corrections") == [("e2e-committed-void",)]

    # -- 4. the invoice: 30 s, ¥30.00
    gpubill.run("tenant", "add", "acme", "--name", "Acme")
    gpubill.run("invoice", "run", "--period", "2026-03")
    acme = gpubill.json("invoice", "show", "--period", "2026-03", "--tenant", "acme", "--format", "json")
    rent = f"{Decimal(fen(Fraction(30 * 3600, 3600))):.2f}"  # 30 s × ¥3600/h
    assert rent == "30.00"
    assert [(l["gpu_model"], l["quantity"], l["amount"]) for l in lines_by_kind(acme)["rent"]] == [
        ("A800-80G", "0.008333", rent)]

    # -- 5. verify-log replays the same log the same way: acme 30.00 both sides, no beta
    done = gpubill.run("verify-log", "--period", "2026-03", "--json", check=False)
    report = json.loads(done.stdout)
    assert done.returncode == 0 and report["clean"], (done.stdout, done.stderr)
    assert {t["tenant"]: (t["log"], t["billed"]) for t in report["tenants"]} == {"acme": (rent, rent)}
