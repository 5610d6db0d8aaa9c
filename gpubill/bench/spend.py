"""`gpubill bench spend`: how fresh the stream's month-to-date spend is at a steady rate.

On a private broker and a private chDB in a temporary directory, served from its own process
(`gpubill clickhouse serve`: the worker and the tracker are two processes, as a ClickHouse
server would serve them):

1. register the simulated fleet's tenants, each with a monthly budget and a top-up sized so
   that it runs out about a quarter into the run (the bench's rules are the defaults
   without the new-tenant trial credit, so a small balance can run out), so that billing
   events are due while the benchmark runs;
2. start `gpubill worker` (rating; its spend rounds produced, GPUBILL_SPEND on) and
   `gpubill spend-tracker` (the tracker, its own process);
3. produce fresh readings at `rate` per second for `duration_s` seconds;
4. wait until every reading is committed and its spend applied in the tracker's table.

Figures (the tracker writes its own to GPUBILL_BENCH_SPEND every second):

    freshness_p50_s / _p99_s   per spend round applied in the table: now − the Kafka
                               timestamp of the oldest reading of the batch that produced it,
                               an upper bound for every reading it carries
    transit_p50_s / _p99_s     per spend round: applied − made (the worker's clock after
                               its batch was written); consume_p50_s / _p99_s applied − its
                               Kafka timestamp (the wait on the tracker's side alone)
    spend_records_per_s        spend rounds applied by the tracker per second of the run
    tracker_cpu_pct            the tracker process's CPU (user + system) over the run, in %
                               of one core; worker_cpu_pct the same for the worker, and
                               producer_ (this process: the readings' producer), broker_ and
                               gateway_cpu_pct for what shares the machine with them
    exhausted_p50_s / _p99_s   per balance_exhausted event: its emission − the Kafka timestamp
                               of the oldest reading of the batches that changed the tenant
                               since its previous evaluation (an upper bound of reading →
                               event on the topic); exhausted_events how many
    events_emitted             billing events on gpu.billing-events.v1 at the end (read from
                               the topic, not from the tracker)
    readings_per_s             readings / (first produced → last committed and applied)
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Callable

import orjson

from gpubill.config import Settings
from gpubill.bench.broker import bench_settings, private_broker
from gpubill.bench.processes import cpu_s
from gpubill.devenv.ch_gateway import spawn as spawn_gateway
from gpubill.devenv.simulator import simulate_fleet
from schemas.topics import READING_TOPICS, TOPIC_BILLING_EVENTS, TOPIC_POWER, TOPIC_USAGE
from streams.kafka.admin import ensure_pipeline_topics, ensure_spend_topics, group_offsets

Say = Callable[[str], None]


def bench_spend(*, rate: int = 20_000, duration_s: int = 30, tenants: int = 16, port: int = 39292,
                spend: bool = True, say: Say = lambda _: None) -> dict:
    """Run the benchmark; returns the fields `gpubill bench spend --json` prints. With `spend`
    off the worker runs with GPUBILL_SPEND=0 and no tracker runs: only the rating figures
    (the baseline). The chDB database is served by `gpubill clickhouse serve` from its own
    process (port + 2)."""
    with tempfile.TemporaryDirectory(prefix="gpubill-bench-spend-") as tmp:
        work = Path(tmp)
        with private_broker(work / "kafka", port, say) as broker:
            rules = _rules_without_trial_credit(work / "rules")
            settings = bench_settings(broker.bootstrap, f"chdb://{work / 'ch'}", work, rules=rules, group="bench-spend")
            return _served(settings, work, rules, rate, duration_s, tenants, port, spend, say, broker.running_pid())


def _served(settings: Settings, work: Path, rules: Path, rate: int, duration_s: int, tenants: int, port: int,
            spend: bool, say: Say, broker_pid: int | None) -> dict:
    """The tenants registered on the books, the database served, the run (see bench_spend)."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GPUBILL_KAFKA_")},
           "GPUBILL_KAFKA": settings.kafka, "GPUBILL_CLICKHOUSE": settings.clickhouse,
           "GPUBILL_RULES": str(rules), "GPUBILL_SPEND_TRACKER": "separate",
           "GPUBILL_HOME": str(work), "GPUBILL_GROUP": settings.group, "GPUBILL_METRICS_PORT": "0",
           "GPUBILL_SPEND": "1" if spend else "0",
           "GPUBILL_BENCH_SPEND": str(work / "spend.json"),
           "GPUBILL_BENCH_FRESHNESS": str(work / "rated.json")}
    ensure_pipeline_topics(settings)
    ensure_spend_topics(settings)  # the events topic, read at the end, exists either way
    top_up = _top_up(rate, duration_s, tenants)
    say(f"registering {tenants:,} tenants with a ¥{top_up} top-up each (and a budget of 80 % of it)")
    _register(settings, tenants, top_up)
    say(f"serving the private chDB on 127.0.0.1:{port + 2} (gpubill clickhouse serve)")
    server = spawn_gateway(env, port + 2)
    try:
        env["GPUBILL_CLICKHOUSE"] = server.dsn
        return {"spend": spend, "tenants": tenants, "top_up": str(top_up),
                **_run(settings, env, work, rate, duration_s, tenants, spend, say,
                       beside={"producer": os.getpid(), "broker": broker_pid, "gateway": server.process.pid})}
    finally:
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(timeout=60)


def _rules_without_trial_credit(directory: Path) -> Path:
    """The default rules, less `[[new_tenant_credit]]`: a ¥10 trial credit would outlast a
    small tenant's whole run, and no balance would run out."""
    from billing_rules import DEFAULT_RULES_DIR

    shutil.copytree(DEFAULT_RULES_DIR, directory)
    billing = directory / "billing.toml"
    lines, kept, skipping = billing.read_text(encoding="utf-8").splitlines(), [], False
    for line in lines:
        if line.strip() == "[[new_tenant_credit]]":
            skipping = True
            continue
        if skipping and line.startswith("["):
            skipping = False
        if not skipping:
            kept.append(line)
    billing.write_text("\n".join(kept) + "\n", encoding="utf-8")
    return directory


def _top_up(rate: int, duration_s: int, tenants: int) -> Decimal:
    """A balance that a tenant's share of the fleet spends in about a quarter of the run:
    (rate / 2) cards shared by `tenants`, A800 hourly at ¥10/h (¥1/360 per second), for
    duration_s / 4 seconds — cards are idle at times, so it runs out later for some."""
    cards = Fraction(max(rate // 2, 1), tenants)
    amount = cards * Fraction(duration_s, 4) / 360
    return max(Decimal("0.01"), Decimal(int(amount * 100)) / 100)


def _register(settings: Settings, tenants: int, top_up: Decimal) -> None:
    from billing.balances import set_budget, top_up as add_top_up
    from billing.tenants import add_tenant
    from gpubill.cli.books import open_books
    from warehouse.connection import open_database

    budget = max(Decimal("0.01"), (top_up * Decimal("0.8")).quantize(Decimal("0.01")))
    # on the books, as `gpubill tenant add`, `budget set` and `balance top-up` record them
    with open_database(settings.clickhouse) as database, open_books(database, settings):
        for k in range(tenants):
            tenant = f"tenant-{k + 1:02d}"
            add_tenant(database, tenant, f"Tenant {k + 1}")
            set_budget(database, tenant, str(budget))
            add_top_up(database, tenant, str(top_up), f"bench-{k + 1}")


def _run(settings: Settings, env: dict, work: Path, rate: int, duration_s: int, tenants: int, spend: bool,
         say: Say, beside: dict[str, int | None]) -> dict:
    report = work / "spend.json"
    logs = [open(work / "worker.log", "ab"), open(work / "tracker.log", "ab")]
    processes = {"worker": subprocess.Popen([sys.executable, "-m", "gpubill.cli", "worker"], env=env, stdout=logs[0],
                                            stderr=subprocess.STDOUT)}
    if spend:
        processes["tracker"] = subprocess.Popen([sys.executable, "-m", "gpubill.cli", "spend-tracker"], env=env,
                                                stdout=logs[1], stderr=subprocess.STDOUT)
    try:
        time.sleep(10)  # let the worker and the tracker join their groups before the clock starts
        gpus = max(rate // 2, 1)  # one usage and one power reading per card and second
        say(f"preparing {rate * duration_s:,} readings ({gpus:,} cards, {tenants:,} tenants)")
        ticks = _ticks(simulate_fleet(gpus=gpus, gpu_model="A800-80G", minutes=duration_s // 60 + 1,
                                      start=int(time.time()), tenants=tenants), rate, duration_s, settings.partitions)
        total = rate * duration_s
        say(f"producing {rate:,} readings/s for {duration_s} s")
        pids = {name: process.pid for name, process in processes.items()} | {
            name: pid for name, pid in beside.items() if pid is not None}
        cpu_before = {name: cpu_s(pid) for name, pid in pids.items()}
        applied_before = _applied(report)
        began = time.perf_counter()
        asyncio.run(_produce(settings, ticks))
        produced_s = time.perf_counter() - began
        say(f"produced in {produced_s:.1f} s; waiting for the worker to commit and apply everything")
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            offsets = group_offsets(settings, [TOPIC_USAGE, TOPIC_POWER])
            if offsets and all(committed >= end for committed, end in offsets.values()):
                break
            time.sleep(0.5)
        done_s = time.perf_counter() - began
        if spend:
            say("waiting for the tracker to apply every spend round")
            asyncio.run(_tracker_caught_up(settings))
        spent_s = time.perf_counter() - began
        cpu = {name: cpu_s(pid) - cpu_before[name] for name, pid in pids.items()}
        time.sleep(2)  # its evaluation of the last changes, and one more report
    finally:
        for process in processes.values():
            process.send_signal(signal.SIGTERM)
        for process in processes.values():
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
        for log in logs:
            log.close()
    figures = orjson.loads(report.read_bytes()) if report.exists() else {}
    rated = orjson.loads((work / "rated.json").read_bytes()) if (work / "rated.json").exists() else {}
    applied = (figures.get("applied") or 0) - applied_before
    return {
        "rate_per_s": rate,
        "duration_s": duration_s,
        "readings": total,
        "produced_per_s": round(total / produced_s),
        "readings_per_s": round(total / done_s),
        "rated_p50_s": None if rated.get("p50_s") is None else round(rated["p50_s"], 3),
        "rated_p99_s": None if rated.get("p99_s") is None else round(rated["p99_s"], 3),
        "freshness_p50_s": figures.get("freshness_p50_s"),
        "freshness_p99_s": figures.get("freshness_p99_s"),
        "spend_records": applied if spend else None,
        "spend_records_per_s": round(applied / spent_s, 1) if spend else None,
        "transit_p50_s": figures.get("transit_p50_s"),
        "transit_p99_s": figures.get("transit_p99_s"),
        "consume_p50_s": figures.get("consume_p50_s"),
        "consume_p99_s": figures.get("consume_p99_s"),
        "worker_cpu_pct": round(100 * cpu["worker"] / spent_s, 1),
        "tracker_cpu_pct": round(100 * cpu["tracker"] / spent_s, 1) if spend else None,
        **{f"{name}_cpu_pct": round(100 * cpu[name] / spent_s, 1) if name in cpu else None
           for name in ("producer", "broker", "gateway")},
        "exhausted_events": figures.get("exhausted_events"),
        "exhausted_p50_s": figures.get("exhausted_p50_s"),
        "exhausted_p99_s": figures.get("exhausted_p99_s"),
        "events_emitted": _events_on_topic(settings),
        "events_emitted_by_tracker": figures.get("events_emitted"),
    }


def _applied(report: Path) -> int:
    """Rounds the tracker applied so far (its report; 0 before the first)."""
    try:
        return int(orjson.loads(report.read_bytes()).get("applied") or 0)
    except (OSError, ValueError):
        return 0


TICK_S = 0.1


async def _tracker_caught_up(settings: Settings, timeout_s: float = 300) -> None:
    """Until the tracker group has committed the spend topic to its end (as of now)."""
    from schemas.topics import spend_topic
    from streams.kafka.logs import committed_offsets, end_offsets

    topic = spend_topic(settings.group)
    ends = await end_offsets(settings.kafka, topic, {}, settings.partitions)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done = await committed_offsets(settings.kafka, {}, f"{settings.group}.spend", topic, settings.partitions)
        if all(done.get(p, 0) >= end for p, end in ends.items()):
            return
        await asyncio.sleep(0.5)


def _ticks(fleet, rate: int, duration_s: int, partitions: int) -> list[dict]:
    """The readings as they will be sent, serialized before the clock starts: per tick of
    TICK_S, {(topic, partition): [(key, value)]}, a card's readings on one partition of both topics."""
    per_tick = max(1, int(rate * TICK_S))
    ticks: list[dict] = []
    for n, reading in enumerate(itertools.islice(fleet, rate * duration_s)):
        if n % per_tick == 0:
            ticks.append({})
        key = reading["gpu_uuid"].encode()
        where = (READING_TOPICS[reading["kind"]], zlib.crc32(key) % partitions)
        ticks[-1].setdefault(where, []).append((key, orjson.dumps(reading)))
    return ticks


async def _produce(settings: Settings, ticks: list[dict]) -> None:
    """Send a tick's readings every TICK_S, each partition's as one batch (a node agent's
    producer batches too): the producer's own cost stays far below the worker's."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.split(","), acks="all", linger_ms=5)
    await producer.start()
    try:
        began = time.perf_counter()
        for n, tick in enumerate(ticks):
            ahead = n * TICK_S - (time.perf_counter() - began)
            if ahead > 0:
                await asyncio.sleep(ahead)
            sent = []
            for (topic, partition), messages in tick.items():
                batch = producer.create_batch()
                for key, value in messages:
                    if batch.append(key=key, value=value, timestamp=None) is None:  # full: send it, start another
                        sent.append(await producer.send_batch(batch, topic, partition=partition))
                        batch = producer.create_batch()
                        batch.append(key=key, value=value, timestamp=None)
                sent.append(await producer.send_batch(batch, topic, partition=partition))
            await asyncio.gather(*sent)
    finally:
        await producer.stop()


def _events_on_topic(settings: Settings) -> int:
    from kafka import KafkaConsumer, TopicPartition

    from streams.kafka.settings import consumer_options

    consumer = KafkaConsumer(bootstrap_servers=settings.kafka, enable_auto_commit=False,
                             **consumer_options(settings, client="kafka-python"))
    try:
        partitions = [TopicPartition(TOPIC_BILLING_EVENTS, p)
                      for p in sorted(consumer.partitions_for_topic(TOPIC_BILLING_EVENTS) or ())]
        ends = consumer.end_offsets(partitions)
        starts = consumer.beginning_offsets(partitions)
        return sum(ends[tp] - starts[tp] for tp in partitions)
    finally:
        consumer.close()
