"""`gpubill bench spend`: how fresh the stream's month-to-date spend is at a steady rate.

On a private broker and a private chDB in a temporary directory:

1. register the simulated fleet's tenants, each with a small monthly budget and a top-up,
   so that billing events are due while the benchmark runs;
2. start `gpubill worker` (rating and its share of the spend tracker, GPUBILL_SPEND on);
3. produce fresh readings at `rate` per second for `duration_s` seconds;
4. wait until every reading is committed and its spend applied in the tracker's table.

Figures (the worker writes its own to GPUBILL_BENCH_SPEND every second):

    freshness_p50_s / _p99_s   per spend record applied in the table: now − the Kafka
                               timestamp of the oldest reading of the batch that produced it,
                               an upper bound for every reading it carries
    events_emitted             billing events on gpu.billing-events.v1 at the end (read from
                               the topic, not from the worker)
    readings_per_s             readings / (first produced → last committed and applied)
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import orjson

from gpubill.config import Settings
from gpubill.devenv.kafka_broker import LocalBroker
from gpubill.devenv.simulator import simulate_fleet
from schemas.topics import READING_TOPICS, TOPIC_BILLING_EVENTS, TOPIC_POWER, TOPIC_USAGE
from streams.kafka.admin import ensure_pipeline_topics, ensure_spend_topics, group_offsets
from streams.kafka.producers import make_producer

Say = Callable[[str], None]


def bench_spend(*, rate: int = 20_000, duration_s: int = 30, tenants: int = 16, port: int = 39292,
                say: Say = lambda _: None) -> dict:
    """Run the benchmark; returns the fields `gpubill bench spend --json` prints."""
    with tempfile.TemporaryDirectory(prefix="gpubill-bench-spend-") as tmp:
        work = Path(tmp)
        broker = LocalBroker(work / "kafka", bootstrap=f"localhost:{port}", port=port, controller_port=port + 1)
        broker.up(progress=say)
        try:
            settings = Settings(kafka=broker.bootstrap, clickhouse=f"chdb://{work / 'ch'}", home=str(work),
                                group="bench-spend", metrics_port=0, kafka_security_protocol="PLAINTEXT",
                                kafka_username=None, kafka_password=None, kafka_cafile=None)
            env = {**{k: v for k, v in os.environ.items() if not k.startswith("GPUBILL_KAFKA_")},
                   "GPUBILL_KAFKA": settings.kafka, "GPUBILL_CLICKHOUSE": settings.clickhouse,
                   "GPUBILL_HOME": str(work), "GPUBILL_GROUP": settings.group, "GPUBILL_METRICS_PORT": "0",
                   "GPUBILL_SPEND": "1", "GPUBILL_SPEND_CONTEXT_S": "2",
                   "GPUBILL_BENCH_SPEND": str(work / "spend.json")}
            ensure_pipeline_topics(settings)
            ensure_spend_topics(settings)
            say(f"registering {tenants} tenants with a ¥200 budget and a ¥300 top-up each")
            _register(settings, tenants)
            return _run(settings, env, work, rate, duration_s, tenants, say)
        finally:
            broker.down()


def _register(settings: Settings, tenants: int) -> None:
    from reports.balances import set_budget, top_up
    from reports.tenants import add_tenant
    from warehouse.connection import open_database

    with open_database(settings.clickhouse) as database:
        for k in range(tenants):
            tenant = f"tenant-{k + 1:02d}"
            add_tenant(database, tenant, f"Tenant {k + 1}")
            set_budget(database, tenant, "200")
            top_up(database, tenant, "300", f"bench-{k + 1}")


def _run(settings: Settings, env: dict, work: Path, rate: int, duration_s: int, tenants: int, say: Say) -> dict:
    report = work / "spend.json"
    log = open(work / "worker.log", "ab")
    worker = subprocess.Popen([sys.executable, "-m", "gpubill.cli", "worker"], env=env, stdout=log,
                              stderr=subprocess.STDOUT)
    try:
        time.sleep(10)  # let the worker join both groups before the clock starts
        gpus = max(rate // 2, 1)  # one usage and one power reading per card and second
        say(f"producing {rate:,} readings/s for {duration_s} s ({gpus:,} cards, {tenants} tenants)")
        producer = make_producer(settings)
        fleet = simulate_fleet(gpus=gpus, gpu_model="A800-80G", minutes=duration_s // 60 + 1,
                               start=int(time.time()), tenants=tenants)
        total = rate * duration_s
        began = time.perf_counter()
        for sent, reading in enumerate(itertools.islice(fleet, total)):
            ahead = sent / rate - (time.perf_counter() - began)
            if ahead > 0:
                time.sleep(ahead)
            producer.send(READING_TOPICS[reading["kind"]], key=reading["gpu_uuid"].encode(), value=orjson.dumps(reading))
        producer.flush(timeout=120)
        producer.close()
        produced_s = time.perf_counter() - began
        say(f"produced in {produced_s:.1f} s; waiting for the worker to commit and apply everything")
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            offsets = group_offsets(settings, [TOPIC_USAGE, TOPIC_POWER])
            if offsets and all(committed >= end for committed, end in offsets.values()):
                break
            time.sleep(0.5)
        done_s = time.perf_counter() - began
        time.sleep(3)  # the tracker applies the last records and writes its report
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
        log.close()
    figures = orjson.loads(report.read_bytes()) if report.exists() else {}
    return {
        "rate_per_s": rate,
        "duration_s": duration_s,
        "readings": total,
        "readings_per_s": round(total / done_s),
        "freshness_p50_s": figures.get("freshness_p50_s"),
        "freshness_p99_s": figures.get("freshness_p99_s"),
        "spend_records": figures.get("records"),
        "events_emitted": _events_on_topic(settings),
        "events_emitted_by_worker": figures.get("events_emitted"),
    }


def _events_on_topic(settings: Settings) -> int:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=settings.kafka, enable_auto_commit=False)
    try:
        partitions = [TopicPartition(TOPIC_BILLING_EVENTS, p)
                      for p in sorted(consumer.partitions_for_topic(TOPIC_BILLING_EVENTS) or ())]
        ends = consumer.end_offsets(partitions)
        starts = consumer.beginning_offsets(partitions)
        return sum(ends[tp] - starts[tp] for tp in partitions)
    finally:
        consumer.close()
