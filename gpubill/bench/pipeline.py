"""`gpubill bench pipeline`: measure the pipeline against a plain consumer, side by side.

On a private broker (fresh topics) and a private chDB in a temporary directory:

1. pre-produce G × S usage and power readings (single-reading messages);
2. raw_consume_per_s — an aiokafka consumer reads them all and does nothing: the limit;
3. pipeline_per_s — readings / wall time of `gpubill worker --drain`, from its start until
   it exits with every raw reading and rated second in ClickHouse (`pipeline_s`: that wall
   time); worker_rss_mb is that process's peak resident memory and worker_cpu_s its CPU
   seconds, user + system (from wait4); tracker_cpu_s and gateway_cpu_s the CPU seconds the
   spend tracker and the chDB gateway beside it used meanwhile (None when none ran);
4. freshness — `gpubill worker` runs while a producer sends fresh readings at a steady
   rate; the worker samples, per message, produce time → insert acknowledged.

With live spend on (GPUBILL_SPEND, the default) the workers produce their spend rounds; with
`gateway` a `gpubill spend-tracker` runs beside them on the same cores, as a site on one
machine would run it, started before the readings are produced so that it is up and idle
when the drain begins (`spend_tracker` says whether it ran; without the
gateway the embedded database admits one process, and the rounds wait on their topic).

With `counters` every power reading carries the card's energy counter (the simulator's
`counters`), so that the rater computes counter energy (billing_rules/counters.py);
scripts/bench-counters runs the bench with and without, alternating, side by side.
"""

from __future__ import annotations

import asyncio
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

from gpubill.bench.processes import cpu_s
from gpubill.devenv.ch_gateway import spawn as spawn_gateway
from gpubill.config import Settings
from schemas.topics import READING_TOPICS, TOPIC_POWER, TOPIC_USAGE
from gpubill.devenv.kafka_cluster import LocalCluster
from streams.kafka.admin import ensure_pipeline_topics, group_offsets
from streams.kafka.producers import make_producer
from streams.kafka.settings import consumer_options
from gpubill.devenv.simulator import simulate_fleet

Say = Callable[[str], None]


def bench_pipeline(gpus: int, seconds: int, *, freshness_rate: int = 20_000, freshness_s: int = 10,
                   port: int = 39192, gateway: bool = False, counters: bool = False, brokers: int = 1,
                   say: Say = lambda _: None) -> dict:
    """Run the benchmark; returns the fields `gpubill bench pipeline --json` prints.

    With `gateway` the chDB database is served by `gpubill clickhouse serve` (port + 2) and
    the worker reaches it over HTTP, as it would a ClickHouse server. With `counters` the
    power readings carry the cards' energy counters. With `brokers` 3 the private Kafka is a
    three-node cluster (ports port … port + 5; the gateway then on port + 6) whose topics have
    three replicas and min.insync.replicas 2, so that every acknowledged write is on two
    brokers: scripts/bench-pairs --vary brokers sets it beside one broker.
    """
    with tempfile.TemporaryDirectory(prefix="gpubill-bench-") as tmp:
        work = Path(tmp)
        broker = LocalCluster(work / "kafka", brokers, port)
        broker.up(progress=say)
        gateway_port = port + 2 * brokers
        server = tracker = None
        try:
            embedded = f"chdb://{work / 'ch'}"
            # The bench's own broker is plaintext on loopback, whatever GPUBILL_KAFKA_* security is set.
            settings = Settings(kafka=broker.bootstrap, clickhouse=embedded, home=str(work),
                                group="bench-rating", metrics_port=0, kafka_security_protocol="PLAINTEXT",
                                kafka_username=None, kafka_password=None, kafka_cafile=None)
            env = {**{k: v for k, v in os.environ.items() if not k.startswith("GPUBILL_KAFKA_")},
                   "GPUBILL_KAFKA": settings.kafka, "GPUBILL_CLICKHOUSE": settings.clickhouse,
                   "GPUBILL_HOME": str(work), "GPUBILL_GROUP": settings.group, "GPUBILL_METRICS_PORT": "0"}
            if gateway:
                say(f"serving the private chDB on 127.0.0.1:{gateway_port} (gpubill clickhouse serve)")
                server = spawn_gateway(env, gateway_port)
                env["GPUBILL_CLICKHOUSE"] = server.dsn  # with the password spawn gave the gateway
            ensure_pipeline_topics(settings)
            env["GPUBILL_SPEND_TRACKER"] = "separate"
            if gateway and env.get("GPUBILL_SPEND", "1") not in ("0", "false", "False"):
                # started now, so that it is up and idle when the drain begins, as at a site
                # whose tracker runs all along: its start-up is not the drain's to share
                say("live spend on: gpubill spend-tracker runs beside the worker")
                tracker = subprocess.Popen([sys.executable, "-m", "gpubill.cli", "spend-tracker"], env=env,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            total = gpus * seconds * 2
            say(f"producing {total:,} readings ({gpus} GPUs × {seconds} s × 2 streams)")
            start = int(time.time()) - seconds - 120
            readings = simulate_fleet(gpus=gpus, gpu_model="A800-80G", minutes=-(-seconds // 60), start=start,
                                      tenants=max(1, gpus // 16), counters=counters)
            _produce(settings, itertools.islice(readings, total))

            say("raw consume: a plain consumer reading every message")
            raw_s = asyncio.run(_raw_consume(settings, total))

            say("pipeline: gpubill worker --drain")
            began = time.perf_counter()
            tracker_before = cpu_s(tracker.pid) if tracker is not None else None
            gateway_before = cpu_s(server.process.pid) if server is not None else None
            # GPUBILL_BENCH_PREFIX wraps the drained worker for a profile, e.g. "py-spy record
            # -o prof.txt -f raw --" or "/usr/bin/time -v -o time.txt" (worker_rss_mb is then the wrapper's).
            wrapper = os.environ.get("GPUBILL_BENCH_PREFIX", "").split()
            child = subprocess.Popen(wrapper + [sys.executable, "-m", "gpubill.cli", "worker", "--drain"], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            _, status, usage = os.wait4(child.pid, 0)
            pipeline_s = time.perf_counter() - began
            tracker_cpu = cpu_s(tracker.pid) - tracker_before if tracker is not None else None
            gateway_cpu = cpu_s(server.process.pid) - gateway_before if server is not None else None
            if os.waitstatus_to_exitcode(status) != 0:
                raise RuntimeError(f"the worker failed: {child.stderr.read().decode()[-2000:]}")
            rss_mb = usage.ru_maxrss / 1024
            worker_cpu = usage.ru_utime + usage.ru_stime

            say(f"freshness: {freshness_rate:,} readings/s for {freshness_s} s into a running worker")
            p50, p99 = _freshness(settings, env, work, freshness_rate, freshness_s, gpus, counters, say)
        finally:
            if tracker is not None:
                tracker.send_signal(signal.SIGTERM)
                try:
                    tracker.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    tracker.kill()
            if server is not None:
                server.process.send_signal(signal.SIGTERM)
                server.process.wait(timeout=60)
            broker.down()
    return {
        "raw_consume_per_s": round(total / raw_s),
        "pipeline_per_s": round(total / pipeline_s),
        "ratio": round(raw_s / pipeline_s, 6),  # (total / pipeline_s) ÷ (total / raw_s)
        "freshness_p50_s": p50,
        "freshness_p99_s": p99,
        "worker_rss_mb": round(rss_mb, 1),
        "spend_tracker": tracker is not None,
        "pipeline_s": round(pipeline_s, 3),
        "worker_cpu_s": round(worker_cpu, 3),
        "tracker_cpu_s": round(tracker_cpu, 3) if tracker_cpu is not None else None,
        "gateway_cpu_s": round(gateway_cpu, 3) if gateway_cpu is not None else None,
        "counters": counters,
        "brokers": brokers,
    }


def _produce(settings: Settings, readings) -> None:
    producer = make_producer(settings)
    for reading in readings:
        producer.send(READING_TOPICS[reading["kind"]], key=reading["gpu_uuid"].encode(), value=orjson.dumps(reading))
    producer.flush(timeout=300)
    producer.close()


async def _raw_consume(settings: Settings, total: int) -> float:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(TOPIC_USAGE, TOPIC_POWER, bootstrap_servers=settings.kafka, group_id=None,
                                auto_offset_reset="earliest", max_poll_records=10_000,
                                **consumer_options(settings, client="aiokafka"))
    await consumer.start()
    try:
        seen, began = 0, time.perf_counter()
        while seen < total:
            batches = await consumer.getmany(timeout_ms=1000, max_records=10_000)
            seen += sum(len(messages) for messages in batches.values())
        return time.perf_counter() - began
    finally:
        await consumer.stop()


def _freshness(settings: Settings, env: dict, work: Path, rate: int, duration_s: int, gpus: int, counters: bool,
               say: Say) -> tuple[float | None, float | None]:
    report = work / "freshness.json"
    worker = subprocess.Popen([sys.executable, "-m", "gpubill.cli", "worker"], env={**env, "GPUBILL_BENCH_FRESHNESS": str(report)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(8)  # let the worker join the group before the clock starts
        producer = make_producer(settings)
        fleet = simulate_fleet(gpus=max(gpus, rate // 2), gpu_model="A800-80G", minutes=duration_s // 60 + 1,
                               start=int(time.time()), tenants=4, counters=counters)
        began = time.perf_counter()
        for sent, reading in enumerate(itertools.islice(fleet, rate * duration_s)):
            ahead = sent / rate - (time.perf_counter() - began)
            if ahead > 0:
                time.sleep(ahead)
            producer.send(READING_TOPICS[reading["kind"]], key=reading["gpu_uuid"].encode(), value=orjson.dumps(reading))
        producer.flush(timeout=120)
        producer.close()
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:  # until the worker has caught up (committed = end)
            offsets = group_offsets(settings, [TOPIC_USAGE, TOPIC_POWER])
            if all(committed >= end for committed, end in offsets.values()):
                break
            time.sleep(1)
        time.sleep(1.5)  # one more freshness report
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    if not report.exists():
        return None, None
    data = orjson.loads(report.read_bytes())
    return (round(data["p50_s"], 3) if data["p50_s"] is not None else None,
            round(data["p99_s"], 3) if data["p99_s"] is not None else None)
