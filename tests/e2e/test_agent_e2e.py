"""`gpubill agent` on the real broker: a trace replayed into Kafka while the broker is stopped
and started again and the agent is killed with SIGKILL once and restarted. Afterwards every
reading of the trace is on its topic once or more, byte for byte the same each time, with the
content written out here from the trace (not by the agent's code), and each card's readings
in order of their seconds (first sight).

The broker is this test's own (private_broker): the test stops it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from schemas.topics import TOPIC_POWER, TOPIC_USAGE
from streams.agent.spool import Spool
from streams.kafka.admin import ensure_topics

pytestmark = [pytest.mark.e2e, pytest.mark.private_broker]

CARDS = 4
SECONDS = 48
SPEED = 4  # trace seconds per wall second: 12 s of sampling
BASE = 1772323200  # 2026-03-01T00:00:00Z
TENANTS = {"GPU-e2e-0": ("acme", "i-0"), "GPU-e2e-1": ("beta", "i-1")}  # 2 and 3 are not rented


def trace_lines() -> list[dict]:
    lines = []
    for s in range(SECONDS):
        for c in range(CARDS):
            line = {"ts": f"2026-03-01T00:00:{s:02d}Z", "gpu_uuid": f"GPU-e2e-{c}",
                    "gpu_model": ["A800-80G", "NVIDIA GeForce RTX 4090", "NVIDIA H800", "A800-80G"][c],
                    "util_pct": (s * 7 + c) % 101, "mem_used_mib": 1000 * c + s,
                    "power_mw": 300_000 + 1_000 * c + s * 37}
            if c != 3:  # card 3 reports no counter
                line.update(energy_mj=5_000_000 + s * (300_000 + 1_000 * c), energy_epoch=f"boot-{c}")
            lines.append(line)
    return lines


def expected_readings(lines: list[dict]) -> dict[str, dict]:
    """event id → the reading's JSON content, written out from the contract (SPEC §3)."""
    models = {"A800-80G": "A800-80G", "NVIDIA GeForce RTX 4090": "RTX4090", "NVIDIA H800": "H800-80G"}
    out = {}
    for line in lines:
        second = BASE + int(line["ts"][17:19])
        uuid = line["gpu_uuid"]
        tenant, instance = TENANTS.get(uuid, (None, None))
        common = {"ts": line["ts"], "site": "guian-1", "node": "gpu-node-7", "gpu_uuid": uuid}
        out[f"u:{uuid}:{second}"] = {"kind": "usage", "event_id": f"u:{uuid}:{second}", **common,
                                     "gpu_model": models[line["gpu_model"]], "tenant": tenant, "instance": instance,
                                     "util_pct": line["util_pct"], "mem_used_mib": line["mem_used_mib"]}
        power = {"kind": "power", "event_id": f"p:{uuid}:{second}", **common,
                 # watts = mW / 1000, exactly
                 "power_w": Fraction(line["power_mw"], 1000)}
        if "energy_mj" in line:
            power.update(energy_mj=line["energy_mj"], energy_epoch=line["energy_epoch"])
        out[f"p:{uuid}:{second}"] = power
    return out


def read_topic(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes]]:
    """Every record of `topic` as (partition, key, value), in partition order."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, allow_auto_create_topics=False)
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        ends = consumer.end_offsets(partitions)
        records: list[tuple[int, bytes, bytes]] = []
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in partitions) and time.monotonic() < deadline:
            for tp, batch in consumer.poll(timeout_ms=1000).items():
                records += [(tp.partition, r.key, r.value) for r in batch]
        return records
    finally:
        consumer.close()


def start_agent(tmp_path: Path, env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "gpubill.cli", "agent", "--source", f"trace:{tmp_path / 'trace.ndjson'}",
         "--assignments", str(tmp_path / "assignments.json"), "--site", "guian-1", "--node", "gpu-node-7",
         "--spool", str(tmp_path / "spool"), "--speed", str(SPEED), "--metrics-port", "0"],
        env=env, cwd=tmp_path, stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)


def wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def spooled_position(tmp_path: Path) -> int:
    """Bytes of segments in the spool (0 before the first append)."""
    return sum(p.stat().st_size for p in (tmp_path / "spool").glob("*.seg"))


def test_agent_replays_a_trace_through_a_broker_restart_and_a_kill9(broker, tmp_path):
    lines = trace_lines()
    (tmp_path / "trace.ndjson").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (tmp_path / "assignments.json").write_text(json.dumps(
        {"cards": {uuid: {"tenant": t, "instance": i} for uuid, (t, i) in TENANTS.items()}}))
    ensure_topics(broker.bootstrap, {TOPIC_USAGE: 4, TOPIC_POWER: 4})  # the agent never creates them
    env = {**os.environ, "GPUBILL_KAFKA": broker.bootstrap, "NO_COLOR": "1"}
    log = tmp_path / "agent.log"

    agent = start_agent(tmp_path, env, log)
    wait_for(lambda: spooled_position(tmp_path) > 0, 60, "the first readings spooled")
    time.sleep(1.5)  # some reach Kafka
    assert broker.down(wait_s=30)
    time.sleep(2.0)  # the agent samples on into its spool with the broker away
    os.killpg(agent.pid, signal.SIGKILL)
    agent.wait(timeout=30)
    agent = start_agent(tmp_path, env, log)  # resumes from the spool, the broker still away
    time.sleep(2.0)
    assert agent.poll() is None, log.read_text()[-3000:]
    assert broker.up(wait_s=120)
    assert agent.wait(timeout=120) == 0, log.read_text()[-3000:]

    expected = expected_readings(lines)
    got: dict[str, bytes] = {}
    first_seen: dict[tuple[int, bytes], list[int]] = defaultdict(list)
    for topic, kind in ((TOPIC_USAGE, "usage"), (TOPIC_POWER, "power")):
        for partition, key, value in read_topic(broker.bootstrap, topic):
            reading = json.loads(value, parse_float=Decimal)
            assert reading["kind"] == kind and key == reading["gpu_uuid"].encode()
            ident = reading["event_id"]
            if ident in got:
                assert got[ident] == value, f"{ident} was sent twice with different bytes"  # a duplicate, not a conflict
                continue
            got[ident] = value
            if kind == "power":
                first_seen[(partition, key)].append(int(ident.rsplit(":", 1)[1]))
    assert sorted(got) == sorted(expected), "readings missing or extra"
    for ident, value in got.items():
        reading = json.loads(value, parse_float=Decimal)
        if "power_w" in reading:
            reading["power_w"] = Fraction(reading["power_w"])
        assert reading == expected[ident], ident
    for (partition, key), seconds in first_seen.items():
        assert seconds == sorted(seconds), f"{key!r} out of order in partition {partition}"
    lines_logged = [json.loads(entry) for entry in log.read_text().splitlines() if entry.startswith("{")]
    assert any(entry.get("fault") == "kafka" for entry in lines_logged), "the broker's absence went unsaid"
    starts = [entry for entry in lines_logged if entry["msg"] == "gpubill agent started"]
    assert len(starts) == 2 and starts[1]["spooled_unacked"] > 0  # the kill left readings Kafka had not taken
    spool = Spool(tmp_path / "spool", max_bytes=1 << 30)
    assert spool.open()["source"]["line"] == len(lines) and spool.unacked == 0  # all of it spooled and acknowledged
    spool.close()
