"""Two workers in one consumer group, a third joining and one leaving while readings flow
(issue 4's rebalance case), on one embedded database shared through `gpubill clickhouse serve`.

Real parts throughout: a fresh Kafka broker, the gateway as a child process holding chDB
in a tmp directory, long-running `gpubill worker` processes (not --drain) pointed at it
with GPUBILL_CLICKHOUSE=http://gpubill:PASSWORD@127.0.0.1:PORT/, readings produced at a steady rate (keyed
and routed as `gpubill replay` does) before, during and after each membership change, and
duplicates replayed with `gpubill replay` at the end. A partition that moves to another
worker mid-stream must be neither lost nor counted twice: its new owner resumes from the
committed offsets and deduplicates re-delivered readings against what is already stored.

It ends like the fault suite (test_faults.py): `gpubill audit` clean, seconds and mJ per
tenant equal the batch join computed in plain Python, no false conflicts, and the May
2026 invoices equal figures computed with Fractions (faults_helpers.expected_invoice).
"""

from __future__ import annotations

import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests.e2e.faults_helpers import (
    committed_total,
    dumps,
    make_readings,
    start_worker,
    truth_of,
    wait_until,
    write_ndjson,
)
from tests.e2e.test_faults import SEED, assert_billed_exactly
from tests.ports import free_port  # reserved: never another test process's (pytest-xdist)

pytestmark = pytest.mark.e2e

SECONDS = 600  # 8 cards, 15 readings a second: 9,000 readings
RATE_PER_S = 400  # readings produced per second while the group changes: 22.5 s of flow



@pytest.fixture
def shared(gpubill, tmp_path):
    """The conftest's `gpubill`, its embedded database served by a gateway child process and
    every command pointed at the gateway; metrics off so that workers can share the host."""
    port = free_port()
    password = secrets.token_urlsafe(24)  # the gateway's `gpubill` user; every command gets it in its DSN
    log = open(tmp_path / "gateway.log", "ab")
    gateway = subprocess.Popen(
        [sys.executable, "-m", "gpubill.cli", "clickhouse", "serve", "--listen", f"127.0.0.1:{port}"],
        env={**gpubill.env, "GPUBILL_GATEWAY_PASSWORD": password}, cwd=gpubill.cwd, stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True)
    up = wait_until(lambda: gateway.poll() is not None or _listening(port), 60)
    assert up and gateway.poll() is None, (tmp_path / "gateway.log").read_text()
    gpubill.env.update({"GPUBILL_CLICKHOUSE": f"http://gpubill:{password}@127.0.0.1:{port}/", "GPUBILL_METRICS_PORT": "0"})
    yield gpubill
    if gateway.poll() is None:
        gateway.send_signal(signal.SIGTERM)
        assert gateway.wait(timeout=30) == 0, (tmp_path / "gateway.log").read_text()
    log.close()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def assignment(bootstrap: str, group_id: str) -> list[frozenset[int]] | None:
    """The reading partitions each member of the workers' group holds, as the broker sees
    them; None while the group is not stable (forming or rebalancing)."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        group = admin.describe_groups([group_id])[group_id]
    except KafkaError:  # no coordinator yet: the group is still forming
        return None
    finally:
        admin.close()
    if group["group_state"] != "Stable":
        return None
    return [frozenset(p for held in member["member_assignment"]["assigned_partitions"]
                      if held["topic"] == "gpu.usage.v1" for p in held["partitions"])
            for member in group["members"]]


def members_holding_partitions(bootstrap: str, group_id: str) -> int:
    held = assignment(bootstrap, group_id)
    return sum(1 for partitions in held if partitions) if held else 0


def stop(worker: subprocess.Popen) -> int:
    """SIGTERM, as an operator scales a worker down; Faust leaves the group and exits."""
    os.killpg(worker.pid, signal.SIGTERM)
    return worker.wait(timeout=60)


class Pump(threading.Thread):
    """Produces the readings at a steady `rate_per_s`, keyed and routed as `gpubill replay`
    does, while the test changes the group. Before reading i it waits for `gates[i]`, if
    there is one: so the test decides that readings are still to come after a change."""

    def __init__(self, bootstrap: str, readings: list[dict], rate_per_s: int, gates: dict[int, threading.Event]) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.readings, self.rate_per_s, self.gates = bootstrap, readings, rate_per_s, gates
        self.produced = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        from kafka import KafkaProducer

        try:
            producer = KafkaProducer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=5)
            step = max(1, self.rate_per_s // 10)
            for first in range(0, len(self.readings), step):
                for index in sorted(i for i in self.gates if first <= i < first + step):
                    self.gates[index].wait(180)
                for reading in self.readings[first:first + step]:
                    topic = "gpu.usage.v1" if reading["kind"] == "usage" else "gpu.power.v1"
                    producer.send(topic, key=reading["gpu_uuid"].encode(), value=dumps(reading).encode())
                producer.flush(timeout=30)
                self.produced += len(self.readings[first:first + step])
                time.sleep(0.1)
            producer.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            self.error = exc


def test_rebalances_while_readings_flow_bill_every_second_once(shared, broker, tmp_path):
    rng = random.Random(SEED + 7)
    readings = make_readings(SECONDS)
    truth = truth_of(readings)
    # acme: A1, A2 rented 600 s, A3 the first 300 s = 1,500 s; beta: B1, B2 = 1,200 s (¥1 a second each)
    assert dict(truth.rent_seconds) == {"acme": 1500, "beta": 1200}
    lines = [dumps(r) for r in readings]
    joined, left = threading.Event(), threading.Event()
    gates = {len(readings) // 2: joined, len(readings) * 4 // 5: left}  # readings still to come after each change
    pump = Pump(broker.bootstrap, readings, RATE_PER_S, gates)
    # a twentieth of the first half again, verbatim, after both rebalances: the worker that
    # owns a partition now must recognise readings rated by the one that owned it before
    duplicates = rng.sample(lines[: len(lines) // 2], len(lines) // 20)
    started = time.monotonic()

    def say(what: str) -> int:
        """Log a step with the readings produced but not yet committed at that moment."""
        uncommitted = pump.produced - committed_total(broker.bootstrap, broker.group)
        print(f"{time.monotonic() - started:6.1f} s  {what}: {pump.produced} produced, {uncommitted} uncommitted")
        return uncommitted

    def logs() -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(tmp_path.glob("*.log")))

    # Every insert takes 0.3 s longer: batches are in flight when the group changes.
    failpoints = tmp_path / "failpoints"
    failpoints.mkdir()
    (failpoints / "clickhouse-slow").write_text("0.3")
    shared.env["GPUBILL_FAILPOINTS"] = str(failpoints)
    workers = [start_worker(shared, log=tmp_path / f"worker{i}.log") for i in (1, 2)]
    assert wait_until(lambda: members_holding_partitions(broker.bootstrap, broker.group) == 2, 60, 0.5), logs()
    say("two workers hold partitions")
    pump.start()

    # a third worker joins while slices are being produced
    assert wait_until(lambda: pump.produced >= len(readings) // 6 or pump.error, 60), logs()
    workers.append(start_worker(shared, log=tmp_path / "worker3.log"))
    at_join = say("third worker started")
    assert wait_until(lambda: members_holding_partitions(broker.bootstrap, broker.group) == 3, 60, 0.5), logs()
    at_join = max(at_join, say("three workers hold partitions"))
    joined.set()

    # the first worker leaves while slices are being produced
    assert wait_until(lambda: pump.produced >= len(readings) * 3 // 5 or pump.error, 60), logs()
    at_leave = say("stopping the first worker")
    assert stop(workers[0]) == 0, logs()
    assert wait_until(lambda: members_holding_partitions(broker.bootstrap, broker.group) == 2, 60, 0.5), logs()
    at_leave = max(at_leave, say("two workers hold partitions again"))
    left.set()
    pump.join(180)
    assert pump.error is None and pump.produced == len(readings), f"{pump.error}\n{logs()}"
    shared.run("replay", str(write_ndjson(tmp_path / "duplicates.ndjson", duplicates)))

    everything = len(lines) + len(duplicates)
    assert wait_until(lambda: committed_total(broker.bootstrap, broker.group) == everything, 90, 0.5), logs()
    say("everything committed")
    assert all(w.poll() is None for w in workers[1:]), logs()  # none crashed on the way
    for worker in workers[1:]:
        assert stop(worker) == 0, logs()
    # both rebalances began or ended with readings produced but not yet committed (the
    # slowed inserts keep batches in flight: the worker would otherwise keep up at once)
    assert at_join > 0 and at_leave > 0

    assert_billed_exactly(shared, truth)
    assert "Code:" not in (tmp_path / "gateway.log").read_text()  # every statement of the workers succeeded
